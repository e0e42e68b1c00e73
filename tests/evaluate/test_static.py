"""Static checks: honest kernels pass, the targeted rules still catch the obvious hacks next to them.

Each allowance (a C++ kernel that aborts or throws on a bad shape, getattr with a literal public name, a
module global that only holds the compiled library) is tested together with the neighbour that stays
flagged. The checks run in-process on source text (no build, no pool).
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from kernelrl.evaluate.backends import get_backend
from kernelrl.evaluate.static import run_static_checks

HEADER = """\
import torch
import torch.nn as nn
from kernelrl.native import load_cpp
"""

KERNEL = '''
SOURCE = r"""
#include <cstdint>
void scaled_relu(const float* x, float* y, int64_t n, float s) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0.f ? x[i] : 0.f) * s;
}
"""
lib = load_cpp(SOURCE, ["scaled_relu"])
'''

MODEL = """
class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.empty_like(x)
        lib.scaled_relu(x, y, x.numel(), self.scale)
        return y
"""


def findings(source: str) -> list[tuple[str, str]]:
    """(check, message) of every rejecting finding."""
    tree = ast.parse(source)
    return [(f.check, f.message) for f in run_static_checks(tree, source, get_backend("cpu")) if f.severity == "reject"]


def checks(source: str) -> set[str]:
    return {check for check, _ in findings(source)}


def candidate(extra: str = "", kernel: str = KERNEL, model: str = MODEL) -> str:
    return HEADER + textwrap.dedent(extra) + kernel + model


def native(body: str) -> str:
    """A candidate whose kernel source is `body` (C++)."""
    kernel = f'\nSOURCE = r"""\n#include <cstdint>\n{textwrap.dedent(body)}\n"""\nlib = load_cpp(SOURCE, ["scaled_relu"])\n'
    return candidate(kernel=kernel)


def test_baseline_candidate_passes() -> None:
    assert findings(candidate()) == []


# -- C/C++: ending the process is a runtime crash, process control stays refused ---------------------

@pytest.mark.parametrize("stop", [
    "abort();", "std::abort();", "exit(2);", "std::exit(1);", 'throw std::invalid_argument("bad shape");',
    "std::terminate();", "quick_exit(3);",
])
def test_native_kernel_may_stop_on_a_bad_shape(stop: str) -> None:
    source = native(f"""
        #include <cstdlib>
        #include <exception>
        #include <stdexcept>
        void scaled_relu(const float* x, float* y, int64_t n, float s) {{
            if (n % 64 != 0) {{ {stop} }}
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
        }}
    """)
    assert findings(source) == []


@pytest.mark.parametrize("call", [
    "fork()", "vfork()", 'execvp("sh", nullptr)', 'execve("/bin/sh", nullptr, nullptr)', 'system("id")',
    'popen("id", "r")', "setsid()", "setpgid(0, 0)", "daemon(0, 0)", "kill(1, 9)", "killpg(1, 9)",
    "ptrace(0, 0, 0, 0)", "clone(nullptr, nullptr, 0, nullptr)", "prctl(0, 0)", "_exit(0)", "getppid()",
])
def test_native_process_control_is_still_refused(call: str) -> None:
    source = native(f"""
        void scaled_relu(const float* x, float* y, int64_t n, float s) {{
            long r = (long){call};
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s + (float)(r * 0);
        }}
    """)
    assert checks(source) == {"native-syscalls"}, findings(source)


@pytest.mark.parametrize("kernel", [
    """
    #include <thread>
    #include <vector>
    void scaled_relu(const float* x, float* y, int64_t n, float s) {
        std::vector<std::thread> pool;
        for (int w = 0; w < 4; ++w)
            pool.emplace_back([=] { for (int64_t i = n * w / 4; i < n * (w + 1) / 4; ++i) y[i] = x[i] * s; });
        for (auto& t : pool) t.join();
    }
    """,
    """
    #include <pthread.h>
    struct Job { const float* x; float* y; int64_t n; float s; };
    static void* run(void* p) { Job* j = (Job*)p; for (int64_t i = 0; i < j->n; ++i) j->y[i] = j->x[i] * j->s; return nullptr; }
    void scaled_relu(const float* x, float* y, int64_t n, float s) {
        pthread_t t; Job job{x, y, n, s};
        pthread_create(&t, nullptr, run, &job);
        pthread_join(t, nullptr);
    }
    """,
    """
    #include <future>
    void scaled_relu(const float* x, float* y, int64_t n, float s) {
        auto half = std::async(std::launch::async, [=] { for (int64_t i = 0; i < n / 2; ++i) y[i] = x[i] * s; });
        for (int64_t i = n / 2; i < n; ++i) y[i] = x[i] * s;
        half.wait();
    }
    """,
])
def test_native_threads_that_join_are_compute(kernel: str) -> None:
    assert findings(native(kernel)) == []


@pytest.mark.parametrize("kernel", [
    """
    #include <thread>
    void scaled_relu(const float* x, float* y, int64_t n, float s) {
        std::thread([=] { for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s; }).detach();
    }
    """,
    """
    #include <pthread.h>
    static void* run(void* p) { return p; }
    void scaled_relu(const float* x, float* y, int64_t n, float s) { pthread_t t; pthread_create(&t, nullptr, run, nullptr); pthread_detach(t); }
    """,
])
def test_native_detached_threads_are_refused_with_what_to_do(kernel: str) -> None:
    source = native(kernel)
    assert checks(source) == {"native-syscalls"}, findings(source)
    assert all("join every thread before the kernel returns" in m for _, m in findings(source))


def test_native_detach_of_a_tensor_without_threads_passes() -> None:
    source = native("""
        #include <torch/extension.h>
        torch::Tensor scaled_relu(torch::Tensor x, double s) { return (x.detach() * s).relu(); }
    """)
    assert findings(source) == []


def test_native_threads_still_may_not_signal() -> None:
    source = native("""
        #include <thread>
        #include <csignal>
        void scaled_relu(const float* x, float* y, int64_t n, float s) {
            std::thread t([=] { kill(1, 9); for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s; });
            t.join();
        }
    """)
    assert checks(source) == {"native-syscalls"}, findings(source)


def test_native_python_c_api_is_refused() -> None:
    source = native("""
        extern "C" int PyGILState_Ensure(void);
        extern "C" int PyRun_SimpleString(const char*);
        __attribute__((constructor)) static void init() { PyGILState_Ensure(); PyRun_SimpleString("pass"); }
        void scaled_relu(const float* x, float* y, int64_t n, float s) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }
    """)
    messages = [m for _, m in findings(source)]
    assert any("PyRun_SimpleString" in m and "Python C API" in m for m in messages)
    assert any("PyGILState_Ensure" in m for m in messages)


def test_native_names_that_merely_start_with_py_pass() -> None:
    source = native("""
        static float Pyramid_level(float v) { return v; }
        static float PyTorchLike(float v) { return v; }
        void scaled_relu(const float* x, float* y, int64_t n, float s) {
            for (int64_t i = 0; i < n; ++i) y[i] = Pyramid_level(PyTorchLike(x[i])) * s;
        }
    """)
    assert findings(source) == []


@pytest.mark.parametrize("include", ['#include "/etc/passwd"', '#include "/dev/zero"', '#include "../../secret.h"',
                                     "#include </proc/self/environ>", "#include SECRET_HEADER", '#embed "/etc/hosts"'])
def test_native_includes_by_path_are_refused(include: str) -> None:
    source = native(f"""
        {include}
        void scaled_relu(const float* x, float* y, int64_t n, float s) {{ for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }}
    """)
    assert checks(source) == {"native-syscalls"}, findings(source)


def test_native_includes_by_name_pass() -> None:
    source = native("""
        #include <immintrin.h>
        #include <cmath>
        #include "omp.h"
        void scaled_relu(const float* x, float* y, int64_t n, float s) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }
    """)
    assert findings(source) == []


# -- getattr: a literal, public name is attribute access; anything else stays dynamic -----------------

@pytest.mark.parametrize("expr", ['getattr(self, "scale", None)', 'getattr(self, "scale")', 'getattr(torch, "relu")'])
def test_getattr_with_literal_public_name_passes(expr: str) -> None:
    model = MODEL.replace("return y", f"_ = {expr}\n        return y")
    assert findings(candidate(model=model)) == []


@pytest.mark.parametrize("expr", [
    'getattr(self, name)', 'getattr(self, "sc" + "ale")', 'getattr(self, "__class__")', 'getattr(self, "__dict__")',
    'getattr(torch, "_C")', 'getattr(self, "_parameters")', 'getattr(torch, "sys")', 'getattr(torch, "os")',
    'getattr(x, "f_globals")', 'getattr(x, "modules")', 'getattr(x, "pythonapi")', 'getattr(self, name="scale")',
])
def test_getattr_with_computed_private_or_introspection_name_is_refused(expr: str) -> None:
    model = MODEL.replace("return y", f"name = 'scale'\n        _ = {expr}\n        return y")
    assert "dynamic-code" in checks(candidate(model=model))


@pytest.mark.parametrize("expr", ["g = getattr", "fns = [setattr, getattr]", "f = eval", "run = exec"])
def test_dynamic_builtins_passed_around_are_refused(expr: str) -> None:
    assert "dynamic-code" in checks(candidate(extra=expr + "\n"))


def test_parameter_named_input_passes() -> None:
    model = MODEL.replace("def forward(self, x):", "def forward(self, input):\n        x = input")
    assert findings(candidate(model=model)) == []


@pytest.mark.parametrize("expr", ['operator.attrgetter("sys.modules")(torch)', 'operator.attrgetter(name)(torch)',
                                  'operator.methodcaller("__subclasses__")(object)', "ag = operator.attrgetter"])
def test_attrgetter_reaching_internals_is_refused(expr: str) -> None:
    source = candidate(extra=f"import operator\nname = 'x'\n_ = {expr}\n")
    assert "dynamic-code" in checks(source), findings(source)


def test_attrgetter_with_public_names_passes() -> None:
    source = candidate(extra='import operator\nweight_of = operator.attrgetter("weight", "linear.bias")\n')
    assert findings(source) == []


# -- a module global that only holds the compiled library ---------------------------------------------

GLOBAL_LIBRARY = '''
_lib = None


def get_lib():
    global _lib
    if _lib is None:
        _lib = load_cpp(SOURCE, ["scaled_relu"])
    return _lib
'''


def test_global_holding_the_compiled_library_passes() -> None:
    assert findings(candidate(extra=GLOBAL_LIBRARY)) == []


def test_annotated_global_library_passes() -> None:
    extra = GLOBAL_LIBRARY.replace('_lib = load_cpp(SOURCE, ["scaled_relu"])', '_lib: object = load_cpp(SOURCE, ["scaled_relu"])')
    assert "_lib: object = load_cpp" in extra
    assert findings(candidate(extra=extra)) == []


@pytest.mark.parametrize("body", [
    "global _last\n    _last = x",  # a result carried across calls
    "global _lib\n    _lib = load_cpp(SOURCE, ['scaled_relu'])\n    _lib = x",  # the library, then something else
    "global _lib, _last\n    _lib = load_cpp(SOURCE, ['scaled_relu'])\n    _last = x",  # one of two names is state
    "global _calls\n    _calls += 1",
    "global _lib\n    _lib, other = load_cpp(SOURCE, ['scaled_relu']), x",
    "global _lib\n    for _lib in [x]:\n        pass",
    "global _lib\n    def _lib():\n        pass",
    "global _lib\n    del _lib",
])
def test_global_state_is_still_refused(body: str) -> None:
    extra = f"_lib = None\n_last = None\n_calls = 0\n\n\ndef remember(x):\n    {body}\n"
    source = candidate(extra=extra)
    assert "monkeypatch" in checks(source), findings(source)


def test_nonlocal_is_still_refused() -> None:
    extra = "def outer():\n    cache = None\n    def inner(x):\n        nonlocal cache\n        cache = x\n    return inner\n"
    assert "monkeypatch" in checks(candidate(extra=extra))


def test_module_level_global_statement_is_still_refused() -> None:
    assert "monkeypatch" in checks(candidate(extra="global _lib\n"))


# -- monkeypatching: writing through an index is not patching the index's module ----------------------

def test_index_computed_with_torch_is_not_a_patch() -> None:
    extra = "MASK = torch.zeros(8, dtype=torch.int32)\nMASK[torch.arange(0, 8, 2)] = 1\n"
    assert findings(candidate(extra=extra)) == []


@pytest.mark.parametrize("stmt", ["torch.relu = abs", "torch.Tensor.__sub__ = None", "torch.ops.aten[0] = 1",
                                  "a, torch.allclose = 1, None"])
def test_patching_torch_is_still_refused(stmt: str) -> None:
    assert "monkeypatch" in checks(candidate(extra=stmt + "\n"))


# -- reaching forbidden modules, ctypes, files and process-wide hooks through allowed ones -------------

@pytest.mark.parametrize("expr", ["torch.os.listdir('/')", "torch.sys.modules", "np.ctypeslib.ctypes.pythonapi",
                                  "np.ctypeslib.load_library('x', '.')", "__builtins__"])
def test_forbidden_modules_through_allowed_ones_are_refused(expr: str) -> None:
    source = candidate(extra=f"import numpy as np\n_ = {expr}\n")
    assert "introspection" in checks(source), findings(source)


@pytest.mark.parametrize("expr", ["np.load('x.npy', allow_pickle=True)", "np.fromfile('/etc/passwd')", "torch.load('x.pt')",
                                  "np.save('x.npy', np.zeros(2))", "np.zeros(2).tofile('x')",
                                  "np.asarray([1], dtype=object).dumps() if False else np.lib.format.open_memmap('x')"])
def test_numpy_and_torch_file_access_is_refused(expr: str) -> None:
    source = candidate(extra=f"import numpy as np\n_ = {expr}\n")
    assert "file-access" in checks(source), findings(source)


def test_triton_and_extension_loaders_are_not_file_access() -> None:
    extra = (
        "import triton.language as tl\nfrom torch.utils import cpp_extension\n\n\n"
        "def body(p):\n    return tl.load(p)\n\n\n"
        "def build():\n    return cpp_extension.load(name='k', sources=['k.cpp'])\n"
    )
    assert "file-access" not in checks(candidate(extra=extra))


@pytest.mark.parametrize("code", [
    "from torch.nn.modules.module import register_module_forward_hook",
    "from torch.nn.modules.module import register_module_forward_pre_hook",
    "ctx = torch._C._DisableTorchDispatch",
    "ctx = torch.utils._python_dispatch._disable_current_modes",
    "from torch.utils import _python_dispatch",
    "ATEN = torch.library.Library('aten', 'IMPL')",
    "ATEN = torch.library.Library(NS, 'IMPL')",
    "torch.library.impl('aten::mm', 'CPU')(abs)",
])
def test_process_wide_hooks_and_operator_overrides_are_refused(code: str) -> None:
    source = candidate(extra=f"NS = 'aten'\n{code}\n")
    assert checks(source) & {"tensor-subclass", "imports"}, findings(source)


def test_own_custom_op_namespace_passes() -> None:
    extra = "MYLIB = torch.library.Library('redteam_ops', 'DEF')\nMYLIB.define('twice(Tensor x) -> Tensor')\n"
    assert findings(candidate(extra=extra)) == []


def test_from_import_of_denied_torch_module_is_refused() -> None:
    assert "imports" in checks(candidate(extra="from torch import _C\n"))
    assert findings(candidate(extra="from torch import nn as _nn\nfrom numpy import float32\n")) == []
