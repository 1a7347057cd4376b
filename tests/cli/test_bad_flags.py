"""The `flexjit` CLI under a generated table of bad flags (issue 31).

Every subcommand runs with each of its options set to each value of a list of bad ones
(negative, zero, huge, non-numeric, empty, control bytes), plus contradictory and meaningless
combinations and bad files. No invocation may crash (exit 128 or more, a sanitizer's exit code or
report), hang, or grow memory without bound; one that fails exits 1 or 2 with a message on
stderr. The rows the issue found, and the others known to be bad, must fail.

$FLEXJIT_CLI names the binary (ctest passes build/bin/flexjit); $FLEXJIT_SANITIZED=1 says it was
built with ASan and UBSan (tools/dev/sanitize.sh): no address-space limit then, ASan's own RSS
limit instead, and longer time limits.
"""

import concurrent.futures
import os
import pathlib
import resource
import signal
import subprocess
import tempfile
import time
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
STANDARD = str(REPO / "dsl" / "lib" / "standard.mask")
CLI = os.environ.get("FLEXJIT_CLI", str(REPO / "build" / "bin" / "flexjit"))
SANITIZED = os.environ.get("FLEXJIT_SANITIZED") == "1"

# Bounds on one invocation: peak resident memory and wall time.
MAX_RSS_BYTES = (2 if SANITIZED else 1) << 30
TIME_LIMIT_S = 120 if SANITIZED else 60
# Exit codes a sanitizer reports with (tools/dev/sanitize.sh sets them).
SANITIZER_EXIT_CODES = {86, 87}

# Values for every numeric or list option: negative, zero, huge, non-numeric, empty, control bytes.
BAD_VALUES = ["-1", "0", "-2147483648", "2147483647", "99999999999999999999", "abc", "", "nan",
              "\x1b[2J"]

# A small valid `run` on the CPU backend; each row overrides one option (or adds some).
RUN_BASE = ["run", STANDARD, "--mask", "sliding", "--set", "window=4", "--device", "cpu",
            "--head-dim", "64", "--heads", "2", "--kv-heads", "1", "--query-lens", "3",
            "--context-lens", "5", "--iterations", "0"]
# The same with its keys dealt into two interleaved shards (context parallelism).
RUN_SHARDED_BASE = RUN_BASE + ["--kv-shards", "2"]
HINTS_BASE = ["hints", STANDARD, "--mask", "causal", "--q-len", "64", "--kv-len", "64"]
EMIT_BASE = ["emit", STANDARD, "--mask", "causal"]
COMPILE_BASE = ["compile", STANDARD, "--mask", "causal", "--arch", "sm_80"]
COMPILE_ALL_BASE = ["compile", STANDARD, "--all", "--arch", "sm_80", "--head-dims", "64",
                    "--dtypes", "bf16"]

# (base, options whose values are replaced by each of BAD_VALUES).
OPTION_TABLE = [
    (RUN_BASE, ["--head-dim", "--page-size", "--heads", "--kv-heads", "--query-lens",
                "--context-lens", "--iterations", "--seed", "--scale", "--layout", "--device",
                "--dtype", "--kv-dtype", "--kv-scale", "--set", "--mask", "-D", "--kv-shards",
                "--kv-interleave", "--kv-shard-layout"]),
    (RUN_SHARDED_BASE, ["--kv-shards", "--kv-interleave", "--kv-shard-layout", "--context-lens"]),
    (HINTS_BASE, ["--q-len", "--kv-len", "--tile", "--b", "--h", "--set", "--mask"]),
    (EMIT_BASE, ["--head-dim", "--page-size", "--dtype", "--arch", "--mask", "-D"]),
    (COMPILE_ALL_BASE, ["--jobs", "--head-dims", "--dtypes", "--page-sizes"]),
    (COMPILE_BASE, ["--arch", "--head-dim", "--page-size"]),
    (["ir", STANDARD], ["--mask", "-D"]),
]


def with_option(base, option, value):
    """`base` with `option` set to `value` (replaced where base has it, else appended)."""
    args = list(base)
    if option in args and option not in ("--set", "-D"):
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


# Rows that must fail (exit 1 or 2), each a reason and the arguments.
MUST_FAIL = [
    ("page size 0 without --encoder (was SIGFPE)", with_option(RUN_BASE, "--page-size", "0")),
    ("negative page size (was length_error)", with_option(RUN_BASE, "--page-size", "-16")),
    ("negative heads (was length_error)", with_option(RUN_BASE, "--heads", "-8")),
    ("context of INT_MAX (was length_error)",
     with_option(RUN_BASE, "--context-lens", "2147483647")),
    ("a context of 2^31 keys (was unbounded memory)",
     with_option(with_option(RUN_BASE, "--context-lens", "2147483000"), "--heads", "1")),
    ("2^31 heads (was unbounded memory)",
     with_option(RUN_BASE, "--heads", "2147483647")),
    ("a huge but int32 query", with_option(RUN_BASE, "--query-lens", "2000000000")),
    ("a batch past the memory limit",
     with_option(with_option(RUN_BASE, "--context-lens", "100000000"), "--query-lens", "1")),
    ("negative iterations", with_option(RUN_BASE, "--iterations", "-1")),
    ("--encoder with --page-size", RUN_BASE[:4] + ["--encoder", "--page-size", "16"]),
    ("--encoder with --context-lens", RUN_BASE[:4] + ["--encoder", "--context-lens", "5"]),
    ("kv heads not dividing heads", with_option(RUN_BASE, "--kv-heads", "3")),
    ("an infinite scale", with_option(RUN_BASE, "--scale", "inf")),
    ("sinks for the wrong number of heads", RUN_BASE + ["--sinks", "1,2,3"]),
    ("a NaN sink", RUN_BASE + ["--sinks", "nan"]),
    ("a +inf sink", RUN_BASE + ["--sinks", "0.5,inf"]),
    ("a sink that is no number", RUN_BASE + ["--sinks", "1,x"]),
    ("one sink for 2^29 heads and no tokens (was 2 GB of sinks)",
     with_option(with_option(with_option(RUN_BASE, "--heads", "536870912"), "--kv-heads", "1"),
                 "--query-lens", "0") + ["--sinks", "0.5"]),
    ("an fp8 cache with --encoder", RUN_BASE[:4] + ["--encoder", "--kv-dtype", "fp8"]),
    ("--kv-scale without an fp8 cache", RUN_BASE + ["--kv-scale", "tensor"]),
    ("--kv-dtype of no cache type", RUN_BASE + ["--kv-dtype", "fp16"]),
    ("--kv-scale of no scale mode", RUN_BASE + ["--kv-dtype", "fp8", "--kv-scale", "channel"]),
    ("no shards", RUN_BASE + ["--kv-shards", "0"]),
    ("more shards than run takes", RUN_BASE + ["--kv-shards", "1025"]),
    ("an interleave of 0", RUN_SHARDED_BASE + ["--kv-interleave", "0"]),
    ("an interleave with contiguous shards",
     RUN_SHARDED_BASE + ["--kv-shard-layout", "contiguous", "--kv-interleave", "4"]),
    ("a shard layout of no kind", RUN_SHARDED_BASE + ["--kv-shard-layout", "ring"]),
    ("shards of the encoder's keys", RUN_BASE[:4] + ["--encoder", "--kv-shards", "2"]),
    ("shards on the GPU", with_option(RUN_SHARDED_BASE, "--device", "cuda")),
    ("-D chunk=0 divides by zero", ["ir", STANDARD, "--mask", "chunked", "-D", "chunk=0"]),
    ("-D chunk=0 in emit", EMIT_BASE[:2] + ["--mask", "chunked", "-D", "chunk=0"]),
    ("emit --arch banana", with_option(EMIT_BASE, "--arch", "banana")),
    ("emit --arch sm_70", with_option(EMIT_BASE, "--arch", "sm_70")),
    ("emit --arch sm_75", with_option(EMIT_BASE, "--arch", "sm_75")),
    ("emit --arch cpu", with_option(EMIT_BASE, "--arch", "cpu")),
    ("compile --arch sm_75", with_option(COMPILE_BASE, "--arch", "sm_75")),
    ("compile -j -1", with_option(COMPILE_ALL_BASE, "--jobs", "-1")),
    ("compile --all --mask", COMPILE_ALL_BASE + ["--mask", "causal"]),
    ("compile --all --ptx", COMPILE_ALL_BASE + ["--ptx"]),
    ("compile --json without --resources", COMPILE_BASE + ["--json"]),
    ("compile --head-dims without --all", COMPILE_BASE + ["--head-dims", "64"]),
    ("compile --arch cpu --sass", with_option(COMPILE_BASE, "--arch", "cpu") + ["--sass"]),
    ("compile without --mask or --all", ["compile", STANDARD, "--arch", "sm_80"]),
    ("check of a directory", ["check", "/tmp"]),
    ("check of an unreadable file", ["check", "/proc/self/mem"]),
    ("check of a device without end", ["check", "/dev/zero"]),
    ("check of a missing file", ["check", "/nonexistent/x.mask"]),
    ("run of a directory", ["run", "/tmp", "--mask", "causal", "--device", "cpu"]),
    ("compile of a directory", ["compile", "/tmp", "--mask", "causal", "--arch", "sm_80"]),
    ("hints with a negative length", with_option(HINTS_BASE, "--q-len", "-5")),
    ("an unknown cache action", ["cache", "bogus"]),
    ("an unknown command", ["frobnicate"]),
    ("no command", []),
]


def invoke(args, env):
    """Runs the CLI; returns (exit code or -signal, stdout, stderr, peak RSS bytes, seconds)."""
    def limit():
        if not SANITIZED:  # ASan reserves terabytes of address space
            resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        process = subprocess.Popen([CLI] + args, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   env=env, preexec_fn=limit)
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.monotonic() - start > TIME_LIMIT_S:
                process.send_signal(signal.SIGKILL)
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.01)
        seconds = time.monotonic() - start
        process.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
        out.seek(0)
        err.seek(0)
        return (process.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"), usage.ru_maxrss * 1024, seconds)


class BadFlagsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(CLI, os.X_OK):
            raise unittest.SkipTest(f"no flexjit CLI at {CLI} (set FLEXJIT_CLI)")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.env = dict(os.environ, FLEXJIT_CACHE_DIR=os.path.join(cls.tmp.name, "cache"))
        if SANITIZED:
            cls.env.setdefault("ASAN_OPTIONS",
                               f"exitcode=86:hard_rss_limit_mb={MAX_RSS_BYTES >> 20}")
            cls.env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:exitcode=87:print_stacktrace=1")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_rows(self, rows):
        """Runs every (name, args) row (in parallel); returns {name: result of invoke}."""
        workers = max(1, min(8, os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = {name: pool.submit(invoke, args, self.env) for name, args in rows}
            return {name: future.result() for name, future in futures.items()}

    def check_bounded(self, name, args, result):
        code, _, err, rss, seconds = result
        context = f"{name}: flexjit {' '.join(repr(a) for a in args)}\nstderr: {err[-2000:]}"
        self.assertLess(seconds, TIME_LIMIT_S, f"hung: {context}")
        self.assertNotIn(code, SANITIZER_EXIT_CODES, f"sanitizer report: {context}")
        self.assertIn(code, (0, 1, 2), f"crashed (exit {code}): {context}")
        self.assertNotIn("runtime error:", err, f"undefined behaviour: {context}")
        self.assertNotIn("terminate called", err, context)
        self.assertLessEqual(rss, MAX_RSS_BYTES, f"peak RSS {rss >> 20} MiB: {context}")
        if code != 0:
            self.assertTrue(err.strip(), f"exit {code} without a message: {context}")

    def test_generated_table_of_bad_values(self):
        rows = []
        for base, options in OPTION_TABLE:
            for option in options:
                for value in BAD_VALUES:
                    args = with_option(base, option, value)
                    rows.append((f"{base[0]} {option} {value!r}", args))
        self.assertGreater(len(rows), 300)
        results = self.run_rows(rows)
        for name, args in rows:
            with self.subTest(name):
                self.check_bounded(name, args, results[name])
                # A value from argv is echoed with its control bytes shown as '?'.
                self.assertNotIn("\x1b", results[name][1] + results[name][2])

    def test_known_bad_invocations_fail_with_a_message(self):
        results = self.run_rows(MUST_FAIL)
        for name, args in MUST_FAIL:
            with self.subTest(name):
                self.check_bounded(name, args, results[name])
                self.assertIn(results[name][0], (1, 2), f"{name}: accepted: {results[name][2]}")

    def test_messages_name_the_problem(self):
        cases = [
            (["check", "/tmp"], "directory"),
            (["check", "/proc/self/mem"], "cannot read"),
            (with_option(EMIT_BASE, "--arch", "sm_75"), "sm_80 or later"),
            (with_option(EMIT_BASE, "--arch", "cpu"), "flexjit ir"),
            (with_option(COMPILE_BASE, "--arch", "sm_70"), "sm_80 or later"),
            (with_option(COMPILE_ALL_BASE, "--jobs", "-1"), "outside [0, 1024]"),
            (with_option(RUN_BASE, "--page-size", "0"), "--encoder"),
            (["ir", STANDARD, "--mask", "chunked", "-D", "chunk=0"], "division by zero"),
            (RUN_BASE[:4] + ["--encoder", "--context-lens", "5"], "drop --context-lens"),
            (RUN_BASE[:4] + ["--encoder", "--kv-dtype", "fp8"], "--encoder reads 16-bit K/V"),
            (RUN_BASE + ["--kv-scale", "head"], "add --kv-dtype fp8"),
            (EMIT_BASE + ["--kv-dtype", "fp8", "--page-size", "0"], "needs a paged kernel"),
            (RUN_BASE + ["--kv-shards", "0"], "outside [1, 1024]"),
            (RUN_SHARDED_BASE + ["--kv-shard-layout", "contiguous", "--kv-interleave", "4"],
             "--kv-interleave deals interleaved shards"),
        ]
        results = self.run_rows([(repr(args), args) for args, _ in cases])
        for args, words in cases:
            with self.subTest(args=args):
                self.assertIn(words, results[repr(args)][2])
                self.assertLess(len(results[repr(args)][2]), 2000)  # one message, not a log

    def test_emit_makes_the_fp8_cache_kernel(self):
        code, out, err, _, _ = invoke(EMIT_BASE + ["--kv-dtype", "fp8"], self.env)
        self.assertEqual(code, 0, err)
        self.assertIn("_kvfp8_page16_", out)
        self.assertIn(", 16, true>(args);", out)

    def test_hostile_source_bytes_never_reach_the_terminal(self):
        path = os.path.join(self.tmp.name, "hostile.mask")
        with open(path, "wb") as f:
            f.write(b"mask m = q >= kv \x1b[2J\x1b]0;owned\x07\x00 @\n")
        code, out, err, _, _ = invoke(["check", path], self.env)
        self.assertEqual(code, 1)
        self.assertIn("hostile.mask:1:", err)
        for byte in ("\x1b", "\x00", "\x07"):
            self.assertNotIn(byte, out + err)

    def test_version_and_help_show_what_they_should(self):
        code, out, _, _, _ = invoke(["--version"], self.env)
        self.assertEqual(code, 0)
        self.assertRegex(out, r"^flexjit \d+\.\d+\.\d+\n$")
        for command, default in (("emit", "128"), ("compile", "64,128"), ("run", "1,7,300")):
            with self.subTest(command):
                code, out, _, _, _ = invoke([command, "--help"], self.env)
                self.assertEqual(code, 0)
                self.assertIn(default, out)

    def test_compile_all_reports_its_summary_with_its_list(self):
        path = os.path.join(self.tmp.name, "one.mask")
        with open(path, "w") as f:
            f.write("mask m = q >= kv\n")
        code, out, err, _, _ = invoke(["compile", path, "--all", "--arch", "sm_80",
                                       "--head-dims", "64", "--dtypes", "bf16"], self.env)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^prefill_m_hd64_bf16_page16_sm80\n1 kernels in [0-9.]+ s: ")

    def test_a_working_invocation_still_works(self):
        code, out, err, _, _ = invoke(RUN_BASE, self.env)
        self.assertEqual(code, 0, err)
        self.assertIn("PASS", out)

    def test_an_fp8_cache_runs_with_either_scale_mode(self):
        for scale in ("tensor", "head"):
            with self.subTest(scale):
                code, out, err, _, _ = invoke(
                    RUN_BASE + ["--kv-dtype", "fp8", "--kv-scale", scale], self.env)
                self.assertEqual(code, 0, err)
                self.assertIn("_bf16_kvfp8_page16", out)
                self.assertIn(f"fp8 e4m3 cache (scales per {scale})", out)
                self.assertIn("PASS", out)

    def test_sharded_keys_run_and_merge(self):
        for extra in (["--kv-interleave", "3"], ["--kv-shard-layout", "contiguous"]):
            with self.subTest(extra):
                code, out, err, _, _ = invoke(
                    with_option(RUN_SHARDED_BASE, "--context-lens", "40") + extra, self.env)
                self.assertEqual(code, 0, err)
                self.assertIn("merged (fj_merge_states_n)", out)
                self.assertIn("unsharded call", out)
                self.assertIn("PASS", out)


if __name__ == "__main__":
    unittest.main()
