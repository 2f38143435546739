"""Why a fwd+bwd step through maskattn.torch costs ~0.9 ms of host time when its ops cost ~0.3 ms."""
import sys, threading, time
import numpy as np, torch
import maskattn
from maskattn._arrays import cupy_or_none, torch_view
from maskattn.backends import cuda
from maskattn.backends.cuda import plans
from maskattn.bench import workloads
from maskattn.bench.common import fwd_bwd_step, median_ms

H, D, n = 16, 128, 16384
cupy = cupy_or_none()
tile = cuda.tile_for(D, "bfloat16")
spec = workloads.build("lf_dilated", n, seed=0)
mask = torch.as_tensor(np.ascontiguousarray(spec.to_dense()[0, 0]), device="cuda")
q = torch.randn(1, H, n, D, device="cuda", dtype=torch.bfloat16)
k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
plan = plans.dense_plan(torch_view(cupy, mask[None, None]), tile)


class Plain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, c):
        return a + 0

    @staticmethod
    def backward(ctx, g):
        return g, g, g


@torch.library.custom_op("probe::ident", mutates_args=())
def ident(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return a + 0


@ident.register_fake
def _(a, b, c):
    return torch.empty_like(a)


ident.register_autograd(lambda ctx, g: (g, g, g), setup_context=lambda ctx, inputs, output: None)
steps = {
    "torch.autograd.Function a + 0": Plain.apply,
    "custom_op a + 0": ident,
    "maskattn precompiled": lambda a, b, c: maskattn.torch.attention(a, b, c, plan),
    "maskattn wrapper": lambda a, b, c: maskattn.torch.scaled_dot_product_attention(a, b, c, attn_mask=mask),
    "sdpa flash": torch.nn.functional.scaled_dot_product_attention,
}


def table(title):
    print(title, "| switch interval", sys.getswitchinterval(), "| threads", [t.name for t in threading.enumerate()])
    for label, fn in steps.items():
        step = fwd_bwd_step(fn, q, k, v, do)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        ms = median_ms(step, 40)
        torch.cuda.synchronize()
        print(f"  {label:32s} host per fwd+bwd step {ms * 1e3:8.1f} us", flush=True)


table("as is")
sys.setswitchinterval(1e-6)
table("switch interval 1 us")
sys.setswitchinterval(0.005)
torch.autograd.set_multithreading_enabled(False)
table("autograd multithreading off")
