"""oneDNN keeps the kernels of a training run's many batch shapes: attnmt enlarges its cache unless the user set it."""

import os
import subprocess
import sys

import pytest

from attnmt.runtime.kernel_cache import KERNEL_CACHE_CAPACITY, KERNEL_CACHE_VARIABLE, enlarge_kernel_cache

# bf16 products of 1,100 shapes, twice over, with oneDNN reporting each kernel it compiles or finds
# (ONEDNN_VERBOSE=profile_create, on stdout). The first pass compiles a kernel per shape; with oneDNN's
# own 1,024 places the second pass compiles every shape again, with attnmt's capacity none.
SHAPES = 1100
TWO_PASSES = f"""
from attnmt.runtime.kernel_cache import enlarge_kernel_cache
enlarge_kernel_cache()
import torch
torch.set_num_threads(1)
weight = torch.randn(16, 16, dtype=torch.bfloat16)
for rows in [*range(1, {SHAPES + 1}), *range(1, {SHAPES + 1})]:
    torch.randn(rows, 16, dtype=torch.bfloat16) @ weight
"""


def _compilations(**environment: str) -> tuple[int, int]:
    """(kernels compiled, kernels compiled or found) over the two passes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONEDNN_", "DNNL_"))}
    done = subprocess.run([sys.executable, "-c", TWO_PASSES],
                          env={**env, "ONEDNN_VERBOSE": "profile_create", **environment},
                          capture_output=True, text=True, check=True, timeout=120)
    reports = [line for line in done.stdout.splitlines() if "create:cache_" in line]
    return sum("create:cache_miss" in line for line in reports), len(reports)


def test_the_cache_keeps_the_kernels_of_every_shape_and_a_users_setting_is_kept():
    compiled, reports = _compilations()
    if reports == 0:
        pytest.skip("bf16 products do not go through oneDNN on this CPU: no kernel cache to enlarge")
    assert 0.9 * SHAPES <= compiled <= SHAPES + 50  # about once per shape: none in the second pass
    compiled_by_users, _ = _compilations(**{KERNEL_CACHE_VARIABLE: "1024"})  # oneDNN's own, as the user set it
    assert compiled_by_users >= 1.9 * compiled  # the second pass compiled again what the first had


def test_the_variable_is_set_only_where_the_user_left_it_unset():
    environment: dict[str, str] = {}
    setting = enlarge_kernel_cache(environment)
    assert environment == {KERNEL_CACHE_VARIABLE: str(KERNEL_CACHE_CAPACITY)}
    assert setting.capacity == str(KERNEL_CACHE_CAPACITY)
    assert KERNEL_CACHE_VARIABLE in setting.describe() and "16384" in setting.describe()
    assert enlarge_kernel_cache(environment).capacity == str(KERNEL_CACHE_CAPACITY)  # again: unchanged
    users = {KERNEL_CACHE_VARIABLE: " 2048 "}
    assert enlarge_kernel_cache(users).capacity == "2048"
    assert users == {KERNEL_CACHE_VARIABLE: " 2048 "}
    empty = {KERNEL_CACHE_VARIABLE: ""}
    assert enlarge_kernel_cache(empty).capacity == str(KERNEL_CACHE_CAPACITY)


def test_the_command_line_sets_it_before_any_command_runs():
    env = {k: v for k, v in os.environ.items() if k != KERNEL_CACHE_VARIABLE}
    code = ("import os, sys; sys.argv = ['attnmt', 'recipes']; from attnmt.cli import main; "
            f"main(); print('CAPACITY', os.environ.get({KERNEL_CACHE_VARIABLE!r}))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert f"CAPACITY {KERNEL_CACHE_CAPACITY}" in done.stdout, done.stderr
