#!/usr/bin/env python3
"""torch_check.py: CPU checks of torch_gpt2_train.py's model (needs torch; safetensors optional):
blutrain's init rules (LayerNorm weights 1, biases 0, c_proj std 0.02/sqrt(2L), padded wte rows 0),
the Hugging Face save/load round trip (names, Conv1D [in, out] layout, 50257 wte rows, tied head),
both head variants' loss against a float64 copy of the model, and zero gradient on the padded rows.
Runs where no F.scaled_dot_product_attention exists (old torch) through a reference shim.
  python3 bench/e2e/torch_check.py      (exit 0 = pass)"""
import math, os, sys, tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if not hasattr(F, "scaled_dot_product_attention"):
    def _sdpa(q, k, v, is_causal=False):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if is_causal:
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        return att.softmax(-1) @ v
    F.scaled_dot_product_attention = _sdpa
import torch_gpt2_train as tg  # noqa: E402


def main():
    torch.manual_seed(0)
    L, C = 2, 32
    m = tg.GPT2(L, 2, C, 64)
    m.init_gpt2(5)
    sd = dict(m.named_parameters())
    assert torch.all(sd["h.0.ln_1.weight"] == 1) and torch.all(sd["ln_f.weight"] == 1)
    assert torch.all(sd["h.1.c_fc.bias"] == 0) and torch.all(sd["h.0.attn_proj.bias"] == 0)
    assert torch.all(m.wte.weight[tg.VOCAB:] == 0)
    std_res = sd["h.0.attn_proj.weight"].std().item()
    assert abs(std_res - 0.02 / math.sqrt(2 * L)) < 0.002, std_res
    assert abs(sd["h.0.c_fc.weight"].std().item() - 0.02) < 0.002
    assert m.lm_head.weight is m.wte.weight
    try:
        import safetensors.torch  # noqa: F401
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "init.safetensors")
            m.save_hf(path)
            hf = safetensors.torch.load_file(path)
            assert hf["wte.weight"].shape == (tg.VOCAB, C) and hf["h.0.attn.c_attn.weight"].shape == (C, 3 * C)
            assert hf["h.1.mlp.c_proj.weight"].shape == (4 * C, C) and len(hf) == 4 + 12 * L
            m2 = tg.GPT2(L, 2, C, 64)
            m2.init_gpt2(6)
            m2.load_hf(path)
            for (n, p), (n2, p2) in zip(m.named_parameters(), m2.named_parameters()):
                assert n == n2 and torch.equal(p, p2), n
        print("HF round trip ok")
    except ImportError:
        print("no safetensors: HF round trip skipped")
    idx = torch.randint(0, tg.VOCAB, (2, 16))
    y = torch.randint(0, tg.VOCAB, (2, 16))
    md = tg.GPT2(L, 2, C, 64).double()
    md.load_state_dict(m.state_dict())
    ref = md(idx, y).item()
    for head in ("slice", "weight"):
        m.head = head
        m.zero_grad()
        loss = m(idx, y)
        loss.backward()
        assert abs(loss.item() - ref) < 1e-5 * abs(ref), (head, loss.item(), ref)
        assert torch.all(m.wte.weight.grad[tg.VOCAB:] == 0), head
    assert abs(ref - math.log(tg.VOCAB)) < 0.1, ref  # near-uniform at init
    print("torch_check passed")


if __name__ == "__main__":
    main()
