"""Builds toy's C++ runtime as `torch_toy._C` with PyTorch's extension builder.

toy has no autoload entry point on purpose: a process uses it by `import torch_toy`, with
TORCH_DEVICE_BACKEND_AUTOLOAD=0 so that an installed sim does not claim PrivateUse1 first.
"""
from __future__ import annotations

import os

from setuptools import setup

# An installed sim must not load (and rename PrivateUse1) while toy builds against torch.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

setup(
    packages=["torch_toy"],
    ext_modules=[CppExtension("torch_toy._C", ["csrc/toy.cpp"], extra_compile_args=["-O2", "-g0"])],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
