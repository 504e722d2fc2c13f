#!/usr/bin/python3
"""The dtype torch gives a binary op's operands, for every pair of tandem's dtypes, each operand
sized or 0-dim (torch.result_type), and a few values where a 0-dim operand meets a narrower sized
one. Run from anywhere: /usr/bin/python3 tests/golden/make_result_type_golden.py"""
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
          "bf16": torch.bfloat16, "i64": torch.int64, "i32": torch.int32, "u8": torch.uint8,
          "bool": torch.bool}
NAME = {v: k for k, v in DTYPES.items()}


def make(dtype, zero_dim):
    return torch.ones(() if zero_dim else (2,), dtype=dtype)


pairs = []
for a_name, a_dt in DTYPES.items():
    for b_name, b_dt in DTYPES.items():
        for a_zero in (False, True):
            for b_zero in (False, True):
                a, b = make(a_dt, a_zero), make(b_dt, b_zero)
                pairs.append({"a": a_name, "a_zero_dim": a_zero, "b": b_name,
                              "b_zero_dim": b_zero,
                              "result": NAME[torch.result_type(a, b)]})

# Values: the 0-dim operand is converted to the result's dtype before the op, as on torch's CPU.
x16 = torch.tensor([3.0, 5.0, -7.0], dtype=torch.float16)
xi = torch.tensor([3, 5, -7], dtype=torch.int32)
values = {
    "f16_mul_f32_scalar": (x16 * torch.tensor(2.1)).float().tolist(),
    "f16_add_f64_scalar": (x16 + torch.tensor(0.1, dtype=torch.float64)).float().tolist(),
    "i32_mul_f32_scalar": (xi * torch.tensor(2.5)).tolist(),
    "i32_add_i64_scalar": (xi + torch.tensor(2**31 + 5)).tolist(),
}
with open(os.path.join(HERE, "result_type.json"), "w") as f:
    json.dump({"generator": "torch " + torch.__version__, "pairs": pairs, "values": values}, f)
print(f"wrote {len(pairs)} dtype pairs and {len(values)} value cases")
