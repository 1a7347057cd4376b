#!/usr/bin/env bash
# The wheel on the GPU machine (issue 32), as a user installs it: a fresh virtual environment
# that sees the machine's torch (a .pth file naming torch's site-packages) and nothing of this
# tree, no PYTHONPATH, FLEXJIT_LIBRARY or LD_LIBRARY_PATH. Runs the CLI, an import (which must
# come from the wheel), and the torch operators' GPU tests (against the ctypes calls,
# torch.compile fullgraph, CUDA-graph capture of plan_run) from a copy of tests/python placed
# outside the tree. Build the wheel here (`pip wheel . -w dist`, or tools/dev/package_check.sh),
# carry it, and run on the GPU machine from the repository root:
#   tools/dev/wheel_gpu_check.sh .carry/wheel/flexjit-*.whl
set -euo pipefail
wheel=${1:?usage: wheel_gpu_check.sh WHEEL}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${WHEEL_CHECK_DIR:-/tmp/flexjit-wheel-check}
torch_site=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
rm -rf "$work" && mkdir -p "$work/tests" "$work/dsl"
python3 -m venv "$work/venv"
echo "$torch_site" >"$(echo "$work"/venv/lib/python3*/site-packages)/system_torch.pth"
"$work/venv/bin/pip" install -q --no-deps --no-index --disable-pip-version-check "$wheel"
# The tests find the masks through their own REPO (two folders up); tools/python is absent there.
cp -r "$repo/tests/python" "$work/tests/" && cp -r "$repo/dsl/lib" "$work/dsl/"
cd "$work/tests/python"
unset PYTHONPATH FLEXJIT_LIBRARY FLEXJIT_SOURCE_DIR LD_LIBRARY_PATH
export FLEXJIT_CACHE_DIR=$work/cache
"$work/venv/bin/flexjit" --version
"$work/venv/bin/python" - "$work" <<'PY'
import sys
import support  # noqa: F401 (puts the absent tools/python first, as in the tree)
import flexjit
import torch
assert flexjit.__file__.startswith(sys.argv[1] + "/venv/"), flexjit.__file__
print("flexjit from", flexjit.__file__, "runtime", hex(flexjit.runtime_version()),
      "torch", torch.__version__, "cuda", torch.cuda.is_available())
PY
"$work/venv/bin/python" -m unittest -v test_torch_ops.TorchOpsGpuTest
