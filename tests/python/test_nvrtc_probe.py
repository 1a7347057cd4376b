"""tools/dev/nvrtc_probe.py: ptxas's resources of an emitted source against a templates folder."""
import os
import subprocess
import sys
import tempfile
import unittest

import support

CLI = support.REPO / "build" / "bin" / "flexjit"
PROBE = support.REPO / "tools" / "dev" / "nvrtc_probe.py"


@unittest.skipUnless(CLI.is_file(), "build/bin/flexjit not built")
class NvrtcProbeTest(unittest.TestCase):
    def probe(self, *args):
        return subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True)

    def test_reports_the_kernels_resources_and_fails_on_a_bad_source(self):
        with tempfile.TemporaryDirectory() as folder:
            source = os.path.join(folder, "causal.cu")
            with open(source, "w") as out:
                subprocess.run([str(CLI), "emit", str(support.REPO / "dsl/lib/standard.mask"),
                                "--mask", "causal", "--head-dim", "64", "--arch", "sm_90a"],
                               stdout=out, check=True)
            done = self.probe("--arch", "sm_90a", "--option=-DFJ_WGMMA_PRODUCER_KV_RANGE=1",
                              source)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertRegex(done.stdout, r"causal\.cu: \d+ registers, spills 0 / 0 bytes")

            broken = os.path.join(folder, "broken.cu")
            with open(broken, "w") as out:
                out.write('#include "paged_prefill.cuh"\nnot a kernel(\n')
            failed = self.probe("--arch", "sm_90a", broken)
            self.assertEqual(failed.returncode, 1)
            self.assertIn("broken.cu: NVRTC failed", failed.stderr)


if __name__ == "__main__":
    unittest.main()
