"""The element-wise family of the benchmark (issue 28): its three spellings agree.

- tools/bench/family.mask, compiled by flexjit, against the predicates of workloads.py: `flexjit
  hints --tile 1x1 --exact` maps every pair, and its brute-force check holds the map to the
  compiled mask (unsound tiles fail the command), so a 1x1 map with no partial tile is the
  compiled mask itself;
- the FA4 mask_mods of fa4_peer.py against the same predicates, run on Python integers through
  a stand-in for CuTe's one-element TensorSSA that keeps the DSL's integer semantics (`//`
  floors, `%` truncates like arith.remsi);
- the tile counts behind the dense-equivalent throughput, and its FLOP accounting.
"""

import dataclasses
import json
import math
import pathlib
import subprocess
import tempfile
import types
import unittest

import support
import workloads as W

import fa4_peer

CLI = support.REPO / "build" / "bin" / "flexjit"
FAMILY = support.REPO / W.FAMILY_FILE


def cli_available():
    return CLI.is_file()


def small_params(seq_len, num_heads):
    """Family params for a small shape: windows short enough to matter."""
    return {
        "streaming": {"window": 37},
        "longformer": {"global_token": W.global_tokens(seq_len, count=5)},
        "bigbird": {"random_block": W.random_blocks(seq_len, per_row=2)},
        "random_bits": {"bits_seed": 7},
        "head_windows": {"head_window": [3 + 29 * h for h in range(num_heads)]},
    }


def small_family(query_len, seq_len, num_heads=32, num_kv_heads=8):
    params = small_params(seq_len, num_heads)
    return [W.Workload(name=f"t_{mask}", kind="prefill", flexjit_mask=mask, mask=mask,
                       score=None, requests=((query_len, seq_len),),
                       params=params.get(mask, {}), num_heads=num_heads,
                       num_kv_heads=num_kv_heads, mask_file=W.FAMILY_FILE)
            for mask in W.FAMILY_MASKS]


def run_hints(mask_file, workload, tile, extra=()):
    query_len, seq_len = workload.requests[0]
    sets = [arg for value in W.hints_sets(workload) for arg in ("--set", value)]
    command = [str(CLI), "hints", str(mask_file), "--mask", workload.flexjit_mask, "--q-len",
               str(query_len), "--kv-len", str(seq_len), "--tile", tile, "--json"]
    done = subprocess.run(command + sets + list(extra), capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)}: {done.stderr}")
    return json.loads(done.stdout)


@unittest.skipUnless(cli_available(), "build/bin/flexjit not built")
class FlexjitAgreesWithPredicatesTest(unittest.TestCase):
    def check_map(self, w, h, data, predicate, P):
        query_len, seq_len = w.requests[0]
        self.assertEqual(data["exactness"]["unsound"], 0)
        rows = data["rows"]
        self.assertEqual(len(rows), query_len)
        for t, row in enumerate(rows):
            q = seq_len - query_len + t
            for kv, cell in enumerate(row):
                self.assertNotEqual(cell, "+", f"pair ({q}, {kv}) undecided")
                self.assertEqual(cell == "#", bool(predicate(0, h, q, kv, P)),
                                 f"{w.mask} h {h}: pair ({q}, {kv})")

    def test_masks_pair_by_pair(self):
        # Queries are the last 150 of 300 keys: positions are logical in both spellings.
        for w in small_family(150, 300):
            if w.mask == "random_bits":
                continue  # its array has free dimensions: test_random_bits below
            heads = [0, 5, 31] if w.mask in W.HEAD_DEPENDENT_MASKS else [0]
            for h in heads:
                with self.subTest(mask=w.mask, h=h):
                    data = run_hints(FAMILY, w, "1x1", ["--exact", "--h", str(h)])
                    self.check_map(w, h, data, W.MASKS[w.mask], W.PyParams(w))

    def test_random_bits(self):
        # The analysis cannot see into `bits` (free dimensions), so the 1x1 map is undecided
        # there; the bit extraction of family.mask's text is checked with the array read
        # replaced by a const word, for words with low, high and all bits set.
        text = FAMILY.read_text()
        read = "(bits[q, kv / 32] >>"
        self.assertEqual(text.count(read), 1)
        text = text.replace(read, "(word >>") + "\nconst word: int = 0\n"
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "bits.mask"
            path.write_text(text)
            w = next(w for w in small_family(40, 70) if w.mask == "random_bits")
            for word in (0, 1, 0x8000, 0xFFFF, 0xA5C3, 0x1234, 0x7FFE, 0x7FFFFFFF, -1,
                         -0x80000000, -0x5A3C5A3D):
                with self.subTest(word=hex(word)):
                    P = types.SimpleNamespace(bits=lambda q, j, word=word: word)
                    data = run_hints(path, w, "1x1", ["--exact", "-D", f"word={word}"])
                    self.check_map(w, 0, data, W.random_bits, P)

    def test_random_words(self):
        words = [W.random_word(1, q, j) for q in range(64) for j in range(16)]
        self.assertTrue(all(-1 << 31 <= x < 1 << 31 for x in words))
        self.assertTrue(any(x < 0 for x in words))  # bit 31 is set in some: the sign
        ones = sum(bin(x & 0xFFFFFFFF).count("1") for x in words) / (32 * len(words))
        self.assertGreater(ones, 0.45)
        self.assertLess(ones, 0.55)
        self.assertNotEqual(W.random_word(1, 3, 4), W.random_word(2, 3, 4))


class ParamsTest(unittest.TestCase):
    def test_t5_table(self):
        self.assertEqual([W.t5_bucket(d) for d in range(17)], list(range(16)) + [16])
        self.assertEqual(W.t5_bucket(127), 31)
        self.assertEqual(W.t5_bucket(10 ** 6), 31)
        table = W.t5_table(4)
        self.assertEqual(len(table), 4)
        self.assertEqual(len(table[0]), W.T5_DISTANCES)
        # One value per bucket: distances in one bucket share it.
        self.assertEqual(table[1][40], table[1][41])
        P = W.PyParams(W.Workload(name="t", kind="prefill", flexjit_mask="causal_t5",
                                  mask="causal", score="t5", requests=((8, 8),),
                                  params={"t5_bias": table}))
        self.assertEqual(W.t5(1.0, 0, 2, 500, 0, P), 1.0 + table[2][W.T5_DISTANCES - 1])
        self.assertEqual(W.t5(1.0, 0, 2, 3, 5, P), 1.0 + table[2][0])

    def test_family_params(self):
        flags = W.global_tokens(1000, count=7)
        self.assertEqual(sum(flags), 7)
        self.assertEqual(flags[0], 1)
        blocks = W.random_blocks(640, per_row=3)
        self.assertEqual(len(blocks), 10)
        self.assertTrue(all(sum(row) == 3 for row in blocks))
        self.assertEqual(W.set_value([0, 0, 0, 1, 0]), "0*3,1,0")
        self.assertEqual(W.set_value([[1, 1], [2, 3]]), "1*2;2,3")


# --- FA4's spellings ----------------------------------------------------------------------------

class Ssa:
    """A one-element TensorSSA of Int32 or Boolean: `[0]` gives the scalar; `//` floors
    (arith.floordivsi) and `%` truncates (arith.remsi), as CuTe's integers do."""

    def __init__(self, value):
        self.value = value

    def __getitem__(self, index):
        assert index == 0
        return self.value

    def _binary(fn):
        def method(self, other):
            return Ssa(fn(self.value, other.value if isinstance(other, Ssa) else other))
        return method

    __add__ = _binary(lambda a, b: a + b)
    __sub__ = _binary(lambda a, b: a - b)
    __floordiv__ = _binary(lambda a, b: a // b)
    __mod__ = _binary(lambda a, b: int(math.fmod(a, b)))
    __and__ = _binary(lambda a, b: a and b)
    __or__ = _binary(lambda a, b: a or b)
    __lt__ = _binary(lambda a, b: a < b)
    __le__ = _binary(lambda a, b: a <= b)
    __gt__ = _binary(lambda a, b: a > b)
    __ge__ = _binary(lambda a, b: a >= b)
    __eq__ = _binary(lambda a, b: a == b)
    __hash__ = None


class Aux:
    """An aux tensor: indexed by a scalar or a tuple of scalars."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, index):
        if isinstance(index, tuple):
            return self.rows[index[0]][index[1]]
        return self.rows[index]


class Fa4AgreesWithPredicatesTest(unittest.TestCase):
    def setUp(self):
        self.saved = (fa4_peer.utils, fa4_peer.cutlass)
        fa4_peer.utils = types.SimpleNamespace(scalar_to_ssa=lambda value, dtype: Ssa(value))
        fa4_peer.cutlass = types.SimpleNamespace(Int32=int)

    def tearDown(self):
        fa4_peer.utils, fa4_peer.cutlass = self.saved

    def aux(self, w, seq_len):
        name = fa4_peer.AUX.get(w.mask)
        if name is None:
            return None
        if name == "bits":
            words = -(-seq_len // W.BITS_PER_WORD)
            return [Aux([[W.random_word(w.params["bits_seed"], q, j) for j in range(words)]
                         for q in range(seq_len)])]
        return [Aux(w.params[name])]

    def test_mask_mods(self):
        # FA4 sees square, one-request calls: q_idx and kv_idx are the positions. The
        # constants of the mods are the consts of family.mask, so the full-size shapes' masks
        # are checked on a grid reaching past a window, a stride and two image rows.
        seq_len, num_heads = 1100, 32
        params = dict(small_params(seq_len, num_heads))
        params["streaming"] = {"window": W.WINDOW}
        params["head_windows"] = {"head_window": W.head_window_sizes(num_heads)}
        queries = list(range(0, 40)) + list(range(250, 300)) + list(range(1020, 1100))
        for mask in W.FAMILY_MASKS:
            w = W.Workload(name=f"t_{mask}", kind="prefill", flexjit_mask=mask, mask=mask,
                           score=None, requests=((seq_len, seq_len),),
                           params=params.get(mask, {}), mask_file=W.FAMILY_FILE)
            mod, aux = fa4_peer.MASK_MODS[mask], self.aux(w, seq_len)
            P = W.PyParams(w)
            heads = [0, 7, 29] if mask in W.HEAD_DEPENDENT_MASKS else [0]
            with self.subTest(mask=mask):
                for h in heads:
                    for q in queries:
                        for kv in range(seq_len):
                            got = mod(Ssa(0), Ssa(h), Ssa(q), Ssa(kv), None, aux)[0]
                            want = W.MASKS[mask](0, h, q, kv, P)
                            if bool(got) != bool(want):
                                self.fail(f"{mask}: h {h} q {q} kv {kv}: FA4 {got}, "
                                          f"predicate {want}")

    def test_plan(self):
        ws = {w.name: w for w in W.workloads()}
        for w in W.select(list(ws.values()), only="family"):
            specs = fa4_peer.plan(w)
            self.assertEqual(len(specs), 1, w.name)  # every family workload is expressible
            _, spec = specs[0]
            if w.score:
                self.assertEqual((spec["causal"], spec["score"], spec["mask"]),
                                 (True, w.score, None))
            else:
                self.assertEqual(spec["mask"], w.mask)
        self.assertEqual([label for label, _ in fa4_peer.plan(ws["prefill_causal_16k"])],
                         ["native causal", "causal mask_mod"])
        self.assertEqual(fa4_peer.plan(ws["prefill_sliding1024_8k"])[0][1]["window"],
                         W.WINDOW)
        self.assertEqual(fa4_peer.plan(ws["decode_b64_4k"]), [])
        self.assertEqual(fa4_peer.plan(ws["prefill_document_8k"]), [])


# --- tiles and the dense-equivalent FLOP count --------------------------------------------------

def brute_force_tiles(w, tile):
    """Tiles of `tile` (query positions x keys) with a visible pair, summed over kv heads, or
    over query heads for a mask that reads h (the kernel packs its rows head-major)."""
    query_len, seq_len = w.requests[0]
    tile_q, tile_k = tile
    P, predicate = W.PyParams(w), W.MASKS[w.mask]
    per_head = w.mask in W.HEAD_DEPENDENT_MASKS
    total = 0
    for head in range(w.num_heads if per_head else 1):
        heads = [head]
        for r in range(-(-query_len // tile_q)):
            for c in range(-(-seq_len // tile_k)):
                total += any(predicate(0, h, seq_len - query_len + t, kv, P)
                             for h in heads
                             for t in range(r * tile_q, min((r + 1) * tile_q, query_len))
                             for kv in range(c * tile_k, min((c + 1) * tile_k, seq_len)))
    return total if per_head else total * w.num_kv_heads


@unittest.skipUnless(cli_available(), "build/bin/flexjit not built")
class TilesTest(unittest.TestCase):
    def hints(self, w, tile_k=64):
        return lambda extra: run_hints(FAMILY if w.mask_file else
                                       support.REPO / "dsl" / "lib" / "standard.mask",
                                       w, "{}x{}".format(*W.flexjit_tile(w, tile_k)), extra)

    def test_causal_dense_flops(self):
        w = W.Workload(name="t", kind="prefill", flexjit_mask="causal", mask="causal",
                       score=None, requests=((256, 256),))
        # 128 MMA rows = 32 positions x 4 heads
        self.assertEqual(W.flexjit_tile(w, 64), (32, 64))
        # Row r of 32 positions reaches key 32 r + 31: tiles c with 64 c <= 32 r + 31.
        per_kv_head = sum(1 for r in range(8) for c in range(4) if 64 * c <= 32 * r + 31)
        self.assertEqual(per_kv_head, 20)
        tiles = W.computed_tiles(w, self.hints(w), 64)
        self.assertEqual(tiles, per_kv_head * 8)
        self.assertEqual(W.dense_equivalent_flops(w, tiles, 64), 4 * 128 * 128 * 64 * 20 * 8)
        # With 128-key tiles: tiles c with 128 c <= 32 r + 31.
        wide = sum(1 for r in range(8) for c in range(2) if 128 * c <= 32 * r + 31)
        self.assertEqual(W.computed_tiles(w, self.hints(w, 128), 128), wide * 8)
        # Causal's visible pairs are 256 * 257 / 2 of the 20 tiles' 20 * 32 * 64 per head.
        self.assertEqual(W.flops(w, W.visible_pairs(w)), 4 * 128 * 32 * 256 * 257 // 2)

    def test_key_tile_follows_the_variant_struct(self):
        # templates/kernel_args.cuh, wgmma_block_n: what the emitted constants choose.
        self.assertEqual(W.key_tile(64, 7, False), 128)
        self.assertEqual(W.key_tile(64, 35, False), 64)
        self.assertEqual(W.key_tile(128, 1, True), 128)
        self.assertEqual(W.key_tile(128, 1, False), 64)
        self.assertEqual(W.key_tile(128, 1, True, kv_fp8=True), 64)
        self.assertEqual(W.key_tile(64, 7, False, narrow_hd64=True), 64)
        self.assertEqual(W.key_tile(128, 1, True, narrow_hd64=True), 128)
        self.assertEqual(W.key_tile(128, 35, True), 64)
        self.assertEqual(W.key_tile(256, 1, True), 64)

    def test_family_tiles_cover_the_visible_ones(self):
        # The kernel computes at least every tile with a visible pair; where the analysis is
        # exact (these masks' tiles are decided whole), exactly those.
        exact = {"dilated", "image2d", "streaming", "head_windows", "bigbird", "longformer"}
        for w in small_family(256, 256, num_heads=8, num_kv_heads=2):
            with self.subTest(mask=w.mask):
                tiles = W.computed_tiles(w, self.hints(w), 64)
                want = brute_force_tiles(w, W.flexjit_tile(w, 64))
                self.assertGreaterEqual(tiles, want)
                if w.mask in exact:
                    self.assertEqual(tiles, want)

    def test_head_dependent_masks_count_tiles_per_query_head(self):
        # head_windows reads h: 128 positions of one head per block, 4 * D * 128 * K per tile.
        w = next(w for w in small_family(256, 256, num_heads=8, num_kv_heads=2)
                 if w.mask == "head_windows")
        self.assertEqual(W.flexjit_tile(w, 64), (128, 64))
        tiles = W.computed_tiles(w, self.hints(w), 64)
        self.assertEqual(tiles, brute_force_tiles(w, (128, 64)))
        self.assertEqual(W.dense_equivalent_flops(w, tiles, 64), 4 * 128 * 128 * 64 * tiles)

    def test_pairs_mean_over_heads(self):
        w = next(w for w in small_family(20, 20, num_heads=2, num_kv_heads=1)
                 if w.mask == "head_windows")
        w = dataclasses.replace(w, params={"head_window": [1, 4]})
        self.assertEqual(W.visible_pairs(w), (20 + (1 + 2 + 3 + 4 * 17)) / 2)


if __name__ == "__main__":
    unittest.main()
