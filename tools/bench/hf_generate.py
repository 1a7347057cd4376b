#!/usr/bin/env python3
"""transformers generate() with attn_implementation="flexjit" beside "sdpa" and
"flex_attention" (issue 35, item 3): tokens per second of an 8B-shaped Llama-3 model.

    PYTHONPATH=tools/python FLEXJIT_LIBRARY=... FLEXJIT_COMMIT=$(cat .carry/COMMIT) \
        python3 tools/bench/hf_generate.py --json /tmp/hf.json --prompts 1024 [--quick]
    ... hf_generate.py --json /tmp/hf.json --append --prompts 8192    # a second command
    python3 tools/bench/results_page.py ingest /tmp/hf.json

Random bf16 weights of Llama-3-8B's shape (32 layers, hidden 4096, 32 query heads over 8 kv
heads of 128, MLP 14336, vocabulary 128256; nothing downloaded), one model whose attention
implementation is switched between runs. Each workload (batch B of random prompts of P tokens,
no padding) runs generate() greedily for exactly --new-tokens tokens with transformers' default
DynamicCache, once to warm up (compiles: flexjit's kernels, torch.compile of flex_attention),
then --repeats times; the median is `ms` and tok_s = B * new tokens / that time. A generate()
of one new token is timed too (prefill_ms), so decode_tok_s = B * (new tokens - 1) /
(ms - prefill_ms). Workloads are "hf_llama3_8b_b<B>_p<P>", impls "flexjit", "sdpa" and
"flex_attention"; each peer row carries `agreement`, the fraction of its greedy tokens equal to
flexjit's. A row that fails (out of memory) has ms null and the error as its note. Torch and
transformers are imported by main() only (tests/python/test_hf_generate.py runs the rest).
"""

import argparse
import json
import pathlib
import statistics
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
PREFIX = "hf_llama3_8b_"
IMPLS = ("flexjit", "sdpa", "flex_attention")

# Llama-3-8B's dimensions (meta-llama/Meta-Llama-3-8B's config.json).
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, max_position_embeddings=16384, rms_norm_eps=1e-5,
                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                 bos_token_id=128000, eos_token_id=None, pad_token_id=None,
                 tie_word_embeddings=False)


def _ints(text):
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=_ints, default=[1, 8, 32])
    parser.add_argument("--prompts", type=_ints, default=[1024, 8192])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--layers", type=int, default=LLAMA3_8B["num_hidden_layers"],
                        help="fewer layers: the same per-layer work, a smaller model")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="batch 1 and 8, prompts of 1024, 32 new tokens, 1 repeat")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="start no workload after this many seconds")
    parser.add_argument("--json", help="write bench.py-style JSON here (after every workload)")
    parser.add_argument("--append", action="store_true",
                        help="keep the rows already in --json (a run split over several "
                        "commands); a workload and impl measured again replaces its row")
    args = parser.parse_args(argv)
    args.impls = [i for i in args.impls.split(",") if i]
    unknown = [i for i in args.impls if i not in IMPLS]
    if unknown or not args.impls:
        parser.error(f"--impls: unknown {', '.join(unknown) or '(none)'}; known: "
                     f"{', '.join(IMPLS)}")
    if args.quick:
        args.batches, args.prompts, args.new_tokens, args.repeats = [1, 8], [1024], 32, 1
    if args.new_tokens < 2 or args.repeats < 1 or args.layers < 1:
        parser.error("--new-tokens >= 2, --repeats >= 1 and --layers >= 1")
    if args.append and not args.json:
        parser.error("--append needs --json")
    return args


def previous_rows(path, append):
    """The rows already in `path` with --append (which parse_args allows only with --json),
    else none."""
    if not append or not pathlib.Path(path).exists():
        return []
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))["rows"]


def merged(previous, rows):
    """previous rows not measured again in rows, then rows."""
    again = {(row["workload"], row["impl"]) for row in rows}
    return [row for row in previous if (row["workload"], row["impl"]) not in again] + rows


def workload(batch, prompt):
    return f"{PREFIX}b{batch}_p{prompt}"


def row_of(batch, prompt, impl, new_tokens, times_ms, prefill_ms, agreement=None, note=None):
    """One results row: `ms` the median generate() time, tok_s, prefill_ms, decode_tok_s."""
    row = {"workload": workload(batch, prompt), "impl": impl, "batch": batch, "prompt": prompt,
           "new_tokens": new_tokens, "ms": None, "tok_s": None, "prefill_ms": None,
           "decode_tok_s": None, "runs_ms": list(times_ms)}
    if times_ms:
        ms = statistics.median(times_ms)
        row.update(ms=ms, tok_s=batch * new_tokens / (ms / 1e3), prefill_ms=prefill_ms)
        if prefill_ms is not None and ms > prefill_ms:
            row["decode_tok_s"] = batch * (new_tokens - 1) / ((ms - prefill_ms) / 1e3)
    if agreement is not None:
        row["agreement"] = agreement
    if note:
        row["note"] = note
    return row


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, str(HERE))
    import torch
    import transformers
    import flexjit.transformers
    from bench import raise_dynamo_limits, run_meta
    if not torch.cuda.is_available():
        print("hf_generate.py needs a CUDA GPU", file=sys.stderr)
        return 2
    raise_dynamo_limits()
    flexjit.transformers.register()
    config = transformers.LlamaConfig(**dict(LLAMA3_8B, num_hidden_layers=args.layers))
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    meta = run_meta(argv, transformers=transformers.__version__, layers=args.layers)
    print(f"{meta['device']}, torch {meta['torch']}, transformers {meta['transformers']}, "
          f"{args.layers} layers", flush=True)
    previous = previous_rows(args.json, args.append)
    rows, start = [], time.monotonic()
    for prompt in args.prompts:
        for batch in args.batches:
            if args.time_limit is not None and time.monotonic() - start > args.time_limit:
                print(f"time limit: {workload(batch, prompt)} and later not run", flush=True)
                break
            ids = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda",
                                generator=torch.Generator("cuda").manual_seed(batch + prompt))
            reference = None
            for impl in args.impls:
                row = run_one(model, impl, ids, args, torch)
                tokens = row.pop("tokens", None)
                if impl == args.impls[0]:
                    reference = tokens
                elif tokens is not None and reference is not None:
                    row["agreement"] = (tokens == reference).float().mean().item()
                rows.append(row)
                shown = f"{row['ms']:.0f} ms, {row['tok_s']:.0f} tok/s (prefill " \
                    f"{row['prefill_ms']:.0f} ms, decode {row['decode_tok_s'] or 0:.0f} tok/s)" \
                    if row["ms"] else row.get("note")
                print(f"{row['workload']}: {impl}: {shown}" +
                      (f", agreement {row['agreement']:.3f}" if "agreement" in row else ""),
                      flush=True)
                if args.json:
                    pathlib.Path(args.json).write_text(json.dumps(
                        {"meta": meta, "rows": merged(previous, rows), "metadata": []},
                        indent=1, default=str))
    return 0


def run_one(model, impl, ids, args, torch):
    """The row of one implementation on one batch, with its greedy tokens under "tokens"."""
    batch, prompt = ids.shape
    model.set_attn_implementation(impl)
    mask = torch.ones_like(ids)

    def generate(new_tokens):
        torch.cuda.synchronize()
        began = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        torch.cuda.synchronize()
        return (time.perf_counter() - began) * 1e3, out[:, prompt:]

    try:
        generate(args.new_tokens)  # compiles and warms up
        prefill_ms = statistics.median(generate(1)[0] for _ in range(args.repeats))
        runs = [generate(args.new_tokens) for _ in range(args.repeats)]
        row = row_of(batch, prompt, impl, args.new_tokens, [ms for ms, _ in runs], prefill_ms)
        row["tokens"] = runs[-1][1]
        return row
    except Exception as error:  # noqa: BLE001 - a failed workload is a row with its reason
        traceback.print_exc()
        torch.cuda.empty_cache()
        return row_of(batch, prompt, impl, args.new_tokens, [], None,
                      note=f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")


if __name__ == "__main__":
    sys.exit(main())
