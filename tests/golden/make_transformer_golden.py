#!/usr/bin/python3
"""Regenerates transformer.safetensors: a small nn.Transformer (d_model 8, 2 heads, 2 encoder and
2 decoder layers, feedforward 16, no dropout) and a GELU nn.TransformerEncoderLayer in PyTorch
1.13, with their weights, inputs and masks, the outputs in training mode and the gradients of
every parameter for a fixed output gradient. Run: /usr/bin/python3 tests/golden/make_transformer_golden.py

Masks are written as numbers (the writer knows F32 and I64): the key padding masks as 0/1
integers, tgt_mask as the float mask with -inf above the diagonal."""
import os

import torch
import torch.nn as nn

from make_model_golden import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))

if __name__ == "__main__":
    torch.manual_seed(77)
    out = {}
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                           dim_feedforward=16, dropout=0.0)
    with torch.no_grad():  # biases and norms away from their initial zeros and ones
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(-0.5, 0.5) if "bias" in name else p.uniform_(0.5, 1.5)
    out.update({"model." + k: v.clone() for k, v in model.state_dict().items()})
    src, tgt = torch.randn(5, 3, 8), torch.randn(4, 3, 8)
    tgt_mask = model.generate_square_subsequent_mask(4)
    src_padding = torch.tensor([[0, 0, 0, 0, 1], [0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    tgt_padding = torch.tensor([[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    model.train()
    y = model(src, tgt, tgt_mask=tgt_mask, src_key_padding_mask=src_padding,
              tgt_key_padding_mask=tgt_padding, memory_key_padding_mask=src_padding)
    gy = torch.randn(y.shape)
    y.backward(gy)
    out.update({"src": src, "tgt": tgt, "tgt_mask": tgt_mask, "src_padding": src_padding.long(),
                "tgt_padding": tgt_padding.long(), "output": y, "grad_output": gy})
    for k, p in model.named_parameters():
        out["grad.model." + k] = p.grad

    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=12, dropout=0.0,
                                       activation="gelu")
    out.update({"gelu_layer." + k: v.clone() for k, v in layer.state_dict().items()})
    src_mask = torch.randn(5, 5)  # an additive float mask
    layer.train()
    z = layer(src, src_mask=src_mask)
    gz = torch.randn(z.shape)
    z.backward(gz)
    out.update({"gelu_src_mask": src_mask, "gelu_output": z, "gelu_grad_output": gz})
    for k, p in layer.named_parameters():
        out["grad.gelu_layer." + k] = p.grad
    write_safetensors(os.path.join(HERE, "transformer.safetensors"), out,
                      {"source": "make_transformer_golden.py", "torch": torch.__version__})
    print(f"wrote {len(out)} tensors to transformer.safetensors")
