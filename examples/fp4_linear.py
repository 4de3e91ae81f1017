"""Your own code, traced: the input quantization of an NVFP4 linear layer,
called as SGLang's NVFP4 layers call FlashInfer, on an emulated RTX PRO 6000
(sm120, the default device).

    graphbreak-doctor trace --target examples.fp4_linear:target

`target` returns the function to trace and its arguments. It is called
inside the emulated device: `device="cuda"` tensors are fake (real shapes and
dtypes, no memory), so no GPU is needed.
"""

import flashinfer
import torch


def quantize_input(x: torch.Tensor, input_scale: torch.Tensor):
    # 16-element blocks, swizzled scales: what FlashInfer's NVFP4 GEMMs expect.
    return flashinfer.fp4_quantize(x, input_scale, sf_vec_size=16, is_sf_swizzled_layout=True)


def target():
    x = torch.empty(128, 6144, dtype=torch.bfloat16, device="cuda")
    input_scale = torch.ones(1, dtype=torch.float32, device="cuda")
    return quantize_input, (x, input_scale)
