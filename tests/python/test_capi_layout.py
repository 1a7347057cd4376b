"""The ctypes structs of flexjit._capi against the C compiler's layout of flexjit.h."""

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from support import REPO
from flexjit import _capi

STRUCTS = {"fj_kernel_desc": _capi.KernelDesc, "fj_paged_attention_args": _capi.PagedAttentionArgs}


@unittest.skipIf(shutil.which(os.environ.get("CC", "cc")) is None, "no C compiler (cc) found")
class StructLayoutTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flexjit/flexjit.h"',
                 "int main(void) {"]
        for c_name, struct in STRUCTS.items():
            lines.append(f'  printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
            for field, _ in struct._fields_:
                lines.append(f'  printf("{c_name} {field} %zu\\n", offsetof({c_name}, {field}));')
        lines += ['  printf("enum sizeof %zu\\n", sizeof(fj_dtype));', "  return 0;", "}"]
        with tempfile.TemporaryDirectory() as tmp:
            source, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(source, "w") as f:
                f.write("\n".join(lines) + "\n")
            subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-I",
                            str(REPO / "runtime" / "include"), source, "-o", exe], check=True)
            output = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
        cls.layout = {}
        for line in output.splitlines():
            struct, field, value = line.split()
            cls.layout[(struct, field)] = int(value)

    def test_sizes_match(self):
        for c_name, struct in STRUCTS.items():
            self.assertEqual(ctypes.sizeof(struct), self.layout[(c_name, "sizeof")], c_name)
        self.assertEqual(ctypes.sizeof(ctypes.c_int), self.layout[("enum", "sizeof")])

    def test_offsets_match(self):
        for c_name, struct in STRUCTS.items():
            for field, _ in struct._fields_:
                with self.subTest(struct=c_name, field=field):
                    self.assertEqual(getattr(struct, field).offset,
                                     self.layout[(c_name, field)])

    def test_every_c_field_is_mirrored(self):
        # A field added to the header but not to _capi shows as a larger C struct; also check
        # that the mirrored fields appear in the header in the same order.
        header = (REPO / "runtime" / "include" / "flexjit" / "flexjit.h").read_text()
        for c_name, struct in STRUCTS.items():
            body = header[header.index(f"typedef struct {c_name} {{"):]
            body = body[:body.index(f"}} {c_name};")]
            positions = [re.search(rf"[ *]{field}[;,]", body).start() for field, _ in struct._fields_]
            self.assertEqual(positions, sorted(positions), c_name)


if __name__ == "__main__":
    unittest.main()
