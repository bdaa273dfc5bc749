#!/usr/bin/env python3
"""Tensor interchange with PyTorch through safetensors (issue 5), run on the device.

PyTorch writes random tensors of every dtype blutensor shares with it (f64, f32, bf16, f16, i64,
i32, u16) at odd shapes, plus metadata; blutensor reads that file and writes it again
(safetensors_roundtrip_tool); PyTorch reads blutensor's file and every tensor must be bitwise
equal to the original, with the same dtype, shape and metadata. Usage:
  torch_safetensors_roundtrip.py <tool> <out_dir> [<metrics.json>]
"""
import json, os, subprocess, sys
import torch
from safetensors.torch import save_file, load_file
from safetensors import safe_open

def main():
    tool, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(20261121)
    tensors = {
        "f64.matrix": torch.randn(17, 33, dtype=torch.float64, generator=g),
        "f32.weight": torch.randn(129, 7, generator=g),
        "f32.scalar": torch.randn((), generator=g),
        "bf16.act": torch.randn(3, 5, 11, generator=g).to(torch.bfloat16),
        "f16.act": torch.randn(2, 1000, generator=g).to(torch.float16),
        "i64.ids": torch.randint(-2**40, 2**40, (4, 9), generator=g, dtype=torch.int64),
        "i32.ids": torch.randint(-2**30, 2**30, (31,), generator=g, dtype=torch.int32),
        "u16.tokens": torch.randint(0, 50257, (1, 64), generator=g, dtype=torch.int32).to(torch.uint16),
        "f32.empty": torch.empty(0, 3),
    }
    meta = {"format": "pt", "written_by": "pytorch"}
    src, dst = os.path.join(out, "torch.safetensors"), os.path.join(out, "blu.safetensors")
    save_file(tensors, src, metadata=meta)
    r = subprocess.run([tool, src, dst], capture_output=True, text=True)
    print(r.stdout.strip(), r.stderr.strip())
    ok = r.returncode == 0
    back = load_file(dst) if ok else {}
    with safe_open(dst, framework="pt") as f:
        back_meta = f.metadata() if ok else {}
    rows = []
    for name, t in tensors.items():
        b = back.get(name)
        same = (b is not None and b.dtype == t.dtype and b.shape == t.shape and
                torch.equal(b.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)))
        rows.append((name, str(t.dtype), tuple(t.shape), same))
        ok = ok and same
    ok = ok and back_meta == meta and set(back) == set(tensors)
    for n, d, s, same in rows:
        print(f"{n:12s} {d:15s} {str(s):14s} {'bitwise equal' if same else 'DIFFERENT'}")
    print("metadata", "equal" if back_meta == meta else f"DIFFERENT: {back_meta}")
    print("safetensors round trip with PyTorch:", "PASS" if ok else "FAIL")
    if len(sys.argv) > 3:
        json.dump({"metrics": {"tensor.safetensors_torch_roundtrip": 1 if ok else 0}},
                  open(sys.argv[3], "w"))
    sys.exit(0 if ok else 1)

if __name__ == "__main__":
    main()
