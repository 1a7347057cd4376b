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

STRUCTS = {"fj_kernel_desc": _capi.KernelDesc,
           "fj_paged_attention_args": _capi.PagedAttentionArgs,
           "fj_varlen_attention_args": _capi.VarlenAttentionArgs,
           "fj_param_info": _capi.ParamInfo, "fj_define": _capi.Define, "fj_array": _capi.ArrayArg,
           "fj_plan_shape": _capi.PlanShape, "fj_kv_cache_write_args": _capi.KvCacheWriteArgs,
           "fj_merge_states_args": _capi.MergeStatesArgs,
           "fj_merge_states_n_args": _capi.MergeStatesNArgs}
ENUMS = {"fj_status": _capi.Status, "fj_dtype": _capi.Dtype, "fj_param_type": _capi.ParamType,
         "fj_device": _capi.Device}
ENUM_PREFIXES = {"fj_status": "FJ_ERROR_", "fj_dtype": "FJ_DTYPE_", "fj_param_type": "FJ_PARAM_",
                 "fj_device": "FJ_DEVICE_"}


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
        for c_name, enum in ENUMS.items():
            lines.append(f'  printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
            for member in enum:
                c_member = "FJ_SUCCESS" if member.name == "SUCCESS" else \
                    ENUM_PREFIXES[c_name] + member.name
                lines.append(f'  printf("{c_name} {member.name} %d\\n", (int){c_member});')
        lines += ["  return 0;", "}"]
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
        for c_name in ENUMS:  # mirrored as ctypes.c_int
            self.assertEqual(ctypes.sizeof(ctypes.c_int), self.layout[(c_name, "sizeof")])

    def test_enum_values_match(self):
        for c_name, enum in ENUMS.items():
            for member in enum:
                with self.subTest(enum=c_name, member=member.name):
                    self.assertEqual(int(member), self.layout[(c_name, member.name)])
        header = (REPO / "runtime" / "include" / "flexjit" / "flexjit.h").read_text()
        for c_name, enum in ENUMS.items():  # no member missing from the mirror
            body = header[header.index(f"typedef enum {c_name} {{"):]
            body = body[:body.index(f"}} {c_name};")]
            self.assertEqual(len(re.findall(r"\bFJ_[A-Z0-9_]+\s*=", body)), len(enum), c_name)

    def test_offsets_match(self):
        for c_name, struct in STRUCTS.items():
            for field, _ in struct._fields_:
                with self.subTest(struct=c_name, field=field):
                    self.assertEqual(getattr(struct, field).offset,
                                     self.layout[(c_name, field)])

    def test_grown_structs_grow_at_the_end(self):
        # A caller built against an older header passes a shorter struct_size: the fields added
        # since (0.3's workspace, 0.4's device, 0.5's num_blocks, 0.6's separate keys, 0.7's
        # sinks, 0.8's fp8 cache, 0.9's context-parallel shard) must follow every older one.
        names = [field for field, _ in _capi.PagedAttentionArgs._fields_]
        self.assertEqual(names[-12:], ["workspace", "workspace_bytes", "num_blocks", "sinks",
                                       "k_scale", "v_scale", "kv_scale_stride",
                                       "kv_shard_offsets", "global_seq_lens", "kv_shard_rank",
                                       "kv_shard_count", "kv_shard_interleave"])
        # A 0.8 caller's struct ends with kv_scale_stride (and its padding): the shard's
        # fields lie wholly past it, so a 0.8 struct_size reads them as null and 0.
        self.assertEqual(-(-(self.layout[("fj_paged_attention_args", "kv_scale_stride")] + 4)
                           // 8) * 8,
                         self.layout[("fj_paged_attention_args", "kv_shard_offsets")])
        varlen = [field for field, _ in _capi.VarlenAttentionArgs._fields_]
        self.assertEqual(varlen[-3:], ["v_stride_batch", "out_stride_batch", "sinks"])
        self.assertEqual(self.layout[("fj_varlen_attention_args", "sinks")] + 8,
                         self.layout[("fj_varlen_attention_args", "sizeof")])
        desc = [field for field, _ in _capi.KernelDesc._fields_]
        self.assertEqual(desc[-3:], ["defines", "num_defines", "kv_dtype"])
        write = [field for field, _ in _capi.KvCacheWriteArgs._fields_]
        self.assertEqual(write[-6:], ["device", "dtype", "cache_dtype", "k_scale", "v_scale",
                                      "kv_scale_stride"])
        merge = [field for field, _ in _capi.MergeStatesArgs._fields_]
        self.assertEqual(merge[-2:], ["device", "sinks"])
        self.assertEqual(self.layout[("fj_merge_states_args", "sinks")] + 8,
                         self.layout[("fj_merge_states_args", "sizeof")])
        # fj_merge_states_n_args is new in 0.9: nothing older to stay compatible with, but its
        # last field is mirrored like every other.
        self.assertEqual(self.layout[("fj_merge_states_n_args", "sinks")] + 8,
                         self.layout[("fj_merge_states_n_args", "sizeof")])
        for c_name, last in (("fj_paged_attention_args", "kv_shard_interleave"),
                             ("fj_kv_cache_write_args", "kv_scale_stride"),
                             ("fj_kernel_desc", "kv_dtype")):
            # The last field, a 4-byte one, then only the padding to the struct's alignment (8).
            self.assertEqual(-(-(self.layout[(c_name, last)] + 4) // 8) * 8,
                             self.layout[(c_name, "sizeof")], c_name)

    def test_every_c_field_is_mirrored(self):
        # A field added to the header but not to _capi shows as a larger C struct; also check
        # that the mirrored fields appear in the header in the same order.
        header = (REPO / "runtime" / "include" / "flexjit" / "flexjit.h").read_text()
        for c_name, struct in STRUCTS.items():
            body = header[header.index(f"typedef struct {c_name} {{"):]
            body = body[:body.index(f"}} {c_name};")]
            body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)  # comments name fields too
            positions = [re.search(rf"[ *]{field}[;,\[]", body).start()
                         for field, _ in struct._fields_]
            self.assertEqual(positions, sorted(positions), c_name)


class PrototypeTest(unittest.TestCase):
    def test_declared_functions_match_the_header(self):
        # Each function _capi declares takes as many arguments as the header's, and an argument
        # struct of the header's type: a mirror passed to the wrong function would be read
        # with another layout.
        header = (REPO / "runtime" / "include" / "flexjit" / "flexjit.h").read_text()
        prototypes = {name: params for name, params in
                      re.findall(r"FJ_API\s[^;(]*?\b(fj_\w+)\(([^)]*)\);", header)}
        mirrors = {struct: c_name for c_name, struct in STRUCTS.items()}
        for name, (_, argtypes) in _capi.signatures().items():
            with self.subTest(function=name):
                params = [p.strip() for p in prototypes[name].split(",")]
                params = [] if params == ["void"] else params
                self.assertEqual(len(argtypes), len(params))
                for argtype, param in zip(argtypes, params):
                    struct = getattr(argtype, "_type_", None)
                    if struct in mirrors:
                        self.assertRegex(param, rf"\b{mirrors[struct]}\s*\*")
        self.assertIn("fj_merge_states_n", _capi.signatures())


if __name__ == "__main__":
    unittest.main()
