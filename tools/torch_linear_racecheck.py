#!/usr/bin/env python3
"""PyTorch's F.linear (forward and backward, with bias) on the shapes and dtypes of
tests/cuda/test_kernels_linear.cpp, with no ember code: run under
`compute-sanitizer --tool racecheck` by tools/cublaslt_racecheck_probe.sh, it shows
whether the hazards racecheck reports inside cuBLASLt's nvjet kernels come with
cuBLASLt itself (issue 33).

Usage: torch_linear_racecheck.py [--names] [m n k]...
  --names  list the CUDA kernels each case ran (torch.profiler; run it natively,
           not under compute-sanitizer)
"""
import sys


def main(argv):
    import torch
    import torch.nn.functional as F

    names = "--names" in argv
    nums = [int(a) for a in argv if not a.startswith("--")]
    if len(nums) % 3:
        sys.exit("torch_linear_racecheck.py: sizes come in m n k triples")
    shapes = [(nums[i], nums[i + 1], nums[i + 2], nums[i + 2]) for i in range(0, len(nums), 3)]
    if not shapes:  # kAligned, kUnaligned, the strided x (rows 8 elements longer)
        shapes = [(1, 8, 8, 8), (129, 136, 264, 264), (4097, 24, 16, 16), (7, 4104, 40, 40),
                  (1, 7, 127, 127), (127, 128, 7, 7), (64, 4097, 16, 16), (130, 24, 257, 257),
                  (129, 136, 264, 272)]
    print(f"torch_linear_racecheck: torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuBLASLt via torch.matmul's addmm path, device {torch.cuda.get_device_name(0)}",
          flush=True)
    dev = torch.device("cuda", 0)
    case = 0
    for label, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                               ("bf16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for m, n, k, ldx in shapes:
            case += 1
            gen = torch.Generator(device="cpu").manual_seed(case)
            wide = torch.randn(m, ldx, generator=gen).to(dev, dtype)
            x = wide[:, :k].detach().requires_grad_(True) if ldx == k else \
                wide.requires_grad_(True)
            w = torch.randn(n, k, generator=gen).to(dev, dtype).requires_grad_(True)
            b = torch.randn(n, generator=gen).to(dev, dtype).requires_grad_(True)
            dy = torch.randn(m, n, generator=gen).to(dev, dtype)

            def step():
                xv = x if ldx == k else x[:, :k]
                y = F.linear(xv, w, b)
                y.backward(dy)
                torch.cuda.synchronize()

            if names:
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    step()
                kernels = [e.name for e in prof.events()
                           if e.device_type == torch.autograd.DeviceType.CUDA]
            else:
                step()
                kernels = []
            print(f"case {case:<4} {label} linear fwd+bwd m={m} n={n} k={k} ldx={ldx}", flush=True)
            for name in kernels:
                print(f"    kernel {name}")
    print(f"torch_linear_racecheck: {case} cases run", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
