"""Writes tests/data/optim_reference.txt: torch.optim (PyTorch 1.13) on a
small model, from weights and data given by formulas that tests/test_optim.c
computes the same way: the loss at each of 100 steps and the parameters
after them, for SGD (plain, and Nesterov momentum with weight decay), Adam
(L2) and AdamW, in float32. Run: python3 tests/python/make_optim_reference.py
"""
import math
import os
import torch

STEPS = 100


def table(n, scale, phase):
    """n float32 values scale * sin(0.37 i + phase): the formula the C test uses."""
    return torch.tensor([scale * math.sin(0.37 * i + phase) for i in range(n)], dtype=torch.float32)


def model():
    w1 = table(32, 0.5, 0.1).reshape(8, 4).requires_grad_()
    b1 = table(8, 0.1, 0.2).requires_grad_()
    w2 = table(24, 0.4, 0.3).reshape(3, 8).requires_grad_()
    b2 = table(3, 0.1, 0.4).requires_grad_()
    return [w1, b1, w2, b2]


def run(make_opt):
    params = model()
    x = table(64, 1.0, 0.5).reshape(16, 4)
    y = table(48, 0.8, 0.6).reshape(16, 3)
    opt = make_opt(params)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        h = torch.tanh(x @ params[0].T + params[1])
        loss = torch.nn.functional.mse_loss(h @ params[2].T + params[3], y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().reshape(-1).tolist() for p in params]


CONFIGS = [
    ("sgd", lambda p: torch.optim.SGD(p, lr=0.1)),
    ("sgd_nesterov", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0, weight_decay=1e-3, nesterov=True)),
    ("adam", lambda p: torch.optim.Adam(p, lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=1e-3)),
    ("adamw", lambda p: torch.optim.AdamW(p, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)),
]

out = os.path.join(os.path.dirname(__file__), "..", "data", "optim_reference.txt")
with open(out, "w") as f:
    f.write("# torch %s, tests/python/make_optim_reference.py\n" % torch.__version__)
    for name, make in CONFIGS:
        losses, params = run(make)
        f.write("%s loss %s\n" % (name, " ".join("%.9g" % v for v in losses)))
        for i, p in enumerate(params):
            f.write("%s param%d %s\n" % (name, i, " ".join("%.9g" % v for v in p)))
