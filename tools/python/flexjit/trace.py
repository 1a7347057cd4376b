"""Symbolic tracing of PyTorch FlexAttention-style functions into flexjit's mask language.

A `mask_mod(b, h, q_idx, kv_idx)` or `score_mod(score, b, h, q_idx, kv_idx)` is called once with
traced values standing for `b`, `h`, `q`, `kv` and `score`; every operation on them builds the
text of a language expression (docs/language.md), so the result is a `.mask` program
(`to_source`) that the library compiles like any other. What the function captures becomes a
declaration: a Python number a `const` (a compile-time constant: one kernel per value), a
`runtime(...)` wrapper a scalar `param`, a tensor an array `param` read at launch from the
captured tensor (3-D and 4-D tensors flattened onto a 2-D array with their inner extents as
scalar params). docs/python.md#tracing describes what is supported.

torch is never imported here: torch functions reach the tracer through `__torch_function__`.
"""

import linecache
import math
import numbers
import os
import sys
import threading
import types
from typing import NamedTuple, Optional, Tuple

__all__ = ["TraceError", "TracedProgram", "Runtime", "runtime", "trace", "to_source",
           "and_masks", "or_masks", "where", "minimum", "maximum", "clamp", "tanh", "exp",
           "exp2", "log", "log2", "sqrt", "sigmoid", "floor", "ceil"]


class TraceError(Exception):
    """A construct the language cannot express, with the function, the source line and the
    construct in the message."""


class Runtime:
    """A captured number passed at launch instead of compiled in: one kernel for every value.
    Change `.value` between calls; its type (int, float or bool) is fixed at the first trace."""

    def __init__(self, value):
        if not isinstance(value, (bool, numbers.Integral, numbers.Real)):
            raise TypeError(f"runtime(): expected an int, float or bool, got "
                            f"{type(value).__name__}")
        self.value = value

    def __repr__(self):
        return f"flexjit.runtime({self.value!r})"


def runtime(value):
    """Marks a captured number as a runtime parameter (see Runtime)."""
    return Runtime(value)


# Precedence levels of the language (docs/language.md#2-grammar), lowest first.
(_TERNARY, _OR, _AND, _EQ, _REL, _BIT_OR, _BIT_XOR, _BIT_AND, _SHIFT, _ADD, _MUL, _UNARY,
 _ATOM) = range(1, 14)
_BITWISE_PREC = {"|": _BIT_OR, "^": _BIT_XOR, "&": _BIT_AND, "<<": _SHIFT, ">>": _SHIFT}
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1
_FLOAT32_MAX = 3.4028234663852886e38

# Names the language reserves (keywords, builtin variables and functions).
_RESERVED = frozenset("""param const mask score variant with true false int bool float any all
b h q kv min max abs clamp where tanh exp exp2 log log2 sqrt sigmoid floor ceil""".split())

_state = threading.local()  # .tracer: the Tracer of the trace in progress on this thread


def _here():
    """(function, file, line, text) of the innermost frame outside flexjit and torch: the line
    of the user's function that is being traced."""
    frame = sys._getframe(1)
    own = os.path.dirname(os.path.abspath(__file__))
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(own) and f"{os.sep}torch{os.sep}" not in path:
            text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno, text
        frame = frame.f_back
    return "?", "?", 0, ""


def _fail(construct):
    function, path, line, text = _here()
    tracer = getattr(_state, "tracer", None)
    role = f" (tracing {tracer.role})" if tracer is not None and tracer.role else ""
    raise TraceError(f"{function}{role}, {path}:{line}: {construct}" +
                     (f"\n    {text}" if text else ""))


class Value:
    """A traced value: the language text of an expression, its precedence and its type ('bool',
    'int' or 'float'). Operators follow torch's rules on 0-d tensors where the language can
    express them."""

    __slots__ = ("text", "prec", "type")
    __array_priority__ = 1000  # numpy defers its operators to ours
    __hash__ = None  # == builds an expression

    def __init__(self, text, prec, type_):
        self.text, self.prec, self.type = text, prec, type_

    def __repr__(self):
        return f"<traced {self.type}: {self.text}>"

    # Python asking for a concrete value: the language has no control flow.
    def __bool__(self):
        _fail("a traced value decides a Python `if`, `while`, `and`, `or`, `not`, `assert` or "
              "`min`/`max` (write `&`, `|`, `~` and torch.where / flexjit.where instead)")

    def __iter__(self):
        _fail("a loop over a traced value (the language has no loops; a fixed count of terms "
              "is fine: unroll it over Python numbers)")

    def __index__(self):
        _fail("a traced value used as a Python int (range(), a list index, a slice)")

    def __int__(self):
        _fail("int() of a traced value (use .int() or .to(torch.int32))")

    def __float__(self):
        _fail("float() or a math function of a traced value (use .float() and torch.* or "
              "flexjit.* functions)")

    def __len__(self):
        _fail("len() of a traced value")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _fail(f"unsupported method or attribute .{name} of a traced value")

    # Arithmetic.
    def __add__(self, other):
        return _arith("+", self, other)

    def __radd__(self, other):
        return _arith("+", other, self)

    def __sub__(self, other):
        return _arith("-", self, other)

    def __rsub__(self, other):
        return _arith("-", other, self)

    def __mul__(self, other):
        return _arith("*", self, other)

    def __rmul__(self, other):
        return _arith("*", other, self)

    def __truediv__(self, other):
        return _truediv(self, other)

    def __rtruediv__(self, other):
        return _truediv(other, self)

    def __floordiv__(self, other):
        return _floordiv(self, other)

    def __rfloordiv__(self, other):
        return _floordiv(other, self)

    def __mod__(self, other):
        return _arith("%", self, other)

    def __rmod__(self, other):
        return _arith("%", other, self)

    def __pow__(self, other):
        return _pow(self, other)

    def __rpow__(self, other):
        return _pow(other, self)

    def __neg__(self):
        if self.type == "bool":
            _fail("unary - of a boolean (use ~)")
        return _unary("-", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _call1("abs", self, keep_type=True)

    # Comparisons.
    def __lt__(self, other):
        return _compare("<", self, other)

    def __le__(self, other):
        return _compare("<=", self, other)

    def __gt__(self, other):
        return _compare(">", self, other)

    def __ge__(self, other):
        return _compare(">=", self, other)

    def __eq__(self, other):
        return _compare("==", self, other)

    def __ne__(self, other):
        return _compare("!=", self, other)

    # Bitwise: & | ^ ~ << >> on ints are the language's bitwise operators; & | ^ ~ of booleans
    # are and, or, xor, not.
    def __and__(self, other):
        return _bitwise("&", self, other)

    def __rand__(self, other):
        return _bitwise("&", other, self)

    def __or__(self, other):
        return _bitwise("|", self, other)

    def __ror__(self, other):
        return _bitwise("|", other, self)

    def __xor__(self, other):
        return _bitwise("^", self, other)

    def __rxor__(self, other):
        return _bitwise("^", other, self)

    def __invert__(self):
        return _invert(self)

    def __lshift__(self, other):
        return _bitwise("<<", self, other)

    def __rlshift__(self, other):
        return _bitwise("<<", other, self)

    def __rshift__(self, other):
        return _bitwise(">>", self, other)

    def __rrshift__(self, other):
        return _bitwise(">>", other, self)

    # torch-style methods.
    def abs(self):
        return abs(self)

    def float(self):
        return _convert(self, "float")

    double = half = bfloat16 = float

    def int(self):
        return _convert(self, "int")

    long = short = int

    def bool(self):
        return _convert(self, "bool")

    def to(self, dtype=None, *args, **kwargs):
        dtype = kwargs.get("dtype", dtype)
        kind = _dtype_kind(dtype)
        if kind is None:
            _fail(f".to({dtype!r}): only a dtype is supported")
        return _convert(self, kind)

    def type_as(self, other):
        return _convert(self, _as_value(other).type)

    def tanh(self):
        return tanh(self)

    def exp(self):
        return exp(self)

    def exp2(self):
        return exp2(self)

    def log(self):
        return log(self)

    def log2(self):
        return log2(self)

    def sqrt(self):
        return sqrt(self)

    def sigmoid(self):
        return sigmoid(self)

    def floor(self):
        return floor(self)

    def ceil(self):
        return ceil(self)

    def clamp(self, min=None, max=None):
        return clamp(self, min, max)

    clip = clamp

    def clamp_min(self, value):
        return clamp(self, value, None)

    def clamp_max(self, value):
        return clamp(self, None, value)

    def minimum(self, other):
        return minimum(self, other)

    def maximum(self, other):
        return maximum(self, other)

    def logical_and(self, other):
        return _logic("&", _bool_of(self), _bool_of(other))

    def logical_or(self, other):
        return _logic("|", _bool_of(self), _bool_of(other))

    def logical_xor(self, other):
        return _logic("^", _bool_of(self), _bool_of(other))

    def logical_not(self):
        return ~_bool_of(self)

    def bitwise_and(self, other):
        return self & other

    def bitwise_or(self, other):
        return self | other

    def bitwise_xor(self, other):
        return self ^ other

    def bitwise_not(self):
        return ~self

    def bitwise_left_shift(self, other):
        return self << other

    def bitwise_right_shift(self, other):
        return self >> other

    def where(self, condition, other):
        return where(condition, self, other)

    def new_ones(self, *size, dtype=None, **kwargs):
        return _filled(1, dtype, self)

    def new_zeros(self, *size, dtype=None, **kwargs):
        return _filled(0, dtype, self)

    def new_full(self, size, fill_value, dtype=None, **kwargs):
        return _filled(fill_value, dtype, self)

    def item(self):
        _fail(".item() of a traced value (a Python number cannot depend on b, h, q or kv)")

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        return _torch_function(func, args, kwargs or {})


def _dtype_kind(dtype):
    """'bool', 'int' or 'float' of a torch dtype (or a Python type); None for anything else."""
    if dtype is bool:
        return "bool"
    if dtype is int:
        return "int"
    if dtype is float:
        return "float"
    text = str(dtype)
    if not text.startswith("torch."):
        return None
    name = text[len("torch."):]
    if name == "bool":
        return "bool"
    if name.startswith(("int", "uint", "long", "short")):
        return "int"
    if name.startswith(("float", "bfloat", "half", "double")):
        return "float"
    return None


def _literal(value):
    """A Python number (or bool) as a Value."""
    if isinstance(value, Value):
        return value
    if isinstance(value, bool):
        return Value("true" if value else "false", _ATOM, "bool")
    if isinstance(value, numbers.Integral):
        value = int(value)
        if not _INT32_MIN <= value <= _INT32_MAX:
            _fail(f"the integer {value} does not fit in the language's int (32 bits)")
        return Value(str(value), _UNARY if value < 0 else _ATOM, "int")
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return Value("sqrt(-1.0)", _ATOM, "float")
        if math.isinf(value):
            return Value("log(0.0)", _ATOM, "float") if value < 0 else \
                Value("-log(0.0)", _UNARY, "float")
        if abs(value) > _FLOAT32_MAX:
            _fail(f"the float {value!r} overflows float32")
        text = repr(abs(value))
        if "e" not in text and "." not in text:
            text += ".0"
        return Value(("-" if math.copysign(1.0, value) < 0 else "") + text,
                     _UNARY if math.copysign(1.0, value) < 0 else _ATOM, "float")
    return None


def _as_value(obj):
    value = _literal(obj)
    if value is not None:
        return value
    tracer = getattr(_state, "tracer", None)
    if tracer is not None:
        value = tracer.capture_scalar(obj)
        if value is not None:
            return value
    _fail(f"unsupported operand of type {type(obj).__name__} ({obj!r:.60})")


def _wrap(value, prec):
    return f"({value.text})" if value.prec < prec else value.text


def _wrap_right(value, prec):
    return f"({value.text})" if value.prec <= prec else value.text


def _number_of(value):
    """A bool used as a number is 0 or 1, as in torch."""
    return Value(f"int({value.text})", _ATOM, "int") if value.type == "bool" else value


def _bool_of(value):
    value = _as_value(value)
    if value.type == "bool":
        return value
    return _compare("!=", value, 0)


def _binary(op, a, b, prec, type_):
    return Value(f"{_wrap(a, prec)} {op} {_wrap_right(b, prec)}", prec, type_)


def _common(a, b):
    return "float" if "float" in (a.type, b.type) else "int"


def _arith(op, a, b):
    a, b = _number_of(_as_value(a)), _number_of(_as_value(b))
    return _binary(op, a, b, _ADD if op in "+-" else _MUL, _common(a, b))


def _truediv(a, b):
    # Python's and torch's / is true division: float even of two ints.
    a, b = _number_of(_as_value(a)), _number_of(_as_value(b))
    if a.type == "int" and b.type == "int":
        a = _convert(a, "float")
    return _binary("/", a, b, _MUL, "float")


def _floordiv(a, b):
    a, b = _number_of(_as_value(a)), _number_of(_as_value(b))
    if a.type == "int" and b.type == "int":
        return _binary("/", a, b, _MUL, "int")  # the language's int / floors, like //
    return _call1("floor", _binary("/", a, b, _MUL, "float"))


def _pow(base, exponent):
    if isinstance(exponent, numbers.Integral) and not isinstance(exponent, bool) and \
            0 <= int(exponent) <= 8:
        base = _number_of(_as_value(base))
        if int(exponent) == 0:
            return _literal(1.0 if base.type == "float" else 1)
        result = base
        for _ in range(int(exponent) - 1):
            result = _arith("*", result, base)
        return result
    if isinstance(base, numbers.Real) and not isinstance(base, bool) and float(base) == 2.0:
        return exp2(exponent)
    if isinstance(base, numbers.Real) and not isinstance(base, bool) and float(base) > 0:
        return exp(_arith("*", math.log(float(base)), exponent))
    _fail("** with a traced or non-integral exponent (supported: x ** n for a Python int n "
          "in [0, 8], and c ** x for a positive Python number c)")


def _unary(op, a):
    text = a.text if a.prec >= _UNARY and not a.text.startswith(("-", "!", "~")) else \
        f"({a.text})"
    return Value(op + text, _UNARY, a.type)


def _compare(op, a, b):
    a, b = _as_value(a), _as_value(b)
    if op in ("==", "!=") and a.type == "bool" and b.type == "bool":
        return _binary(op, a, b, _EQ, "bool")
    a, b = _number_of(a), _number_of(b)
    return _binary(op, a, b, _EQ if op in ("==", "!=") else _REL, "bool")


def _bitwise(op, a, b):
    """`& | ^ << >>` as Python and torch mean them: on two booleans `& | ^` are logic; otherwise
    the language's bitwise operators on ints (a boolean taken as 0 or 1, as torch promotes it),
    which compute in int32 (docs/language.md §5.1: shift counts outside [0, 31] give 0, or the
    sign for >>, as torch.bitwise_left_shift / right_shift do on int32)."""
    a, b = _as_value(a), _as_value(b)
    if op in ("&", "|", "^") and a.type == "bool" and b.type == "bool":
        return _logic(op, a, b)
    for v in (a, b):
        if v.type == "float":
            _fail(f"bitwise {op} on a float value (the language's bitwise operators take ints)")
    a, b = _number_of(a), _number_of(b)
    return _binary(op, a, b, _BITWISE_PREC[op], "int")


def _invert(a):
    """`~`: not of a boolean, the bitwise complement of an int."""
    a = _as_value(a)
    if a.type == "float":
        _fail("bitwise ~ on a float value (the language's bitwise operators take ints)")
    return _unary("!" if a.type == "bool" else "~", a)


def _logic(op, a, b):
    a, b = _as_value(a), _as_value(b)
    for v in (a, b):
        if v.type != "bool":
            _fail(f"logical {op} on an {v.type} value")
    if op == "^":
        return _binary("!=", a, b, _EQ, "bool")
    identity = "true" if op == "&" else "false"  # and_masks/or_masks start from it
    if a.text == identity:
        return b
    if b.text == identity:
        return a
    return _binary("&&" if op == "&" else "||", a, b, _AND if op == "&" else _OR, "bool")


def _convert(value, kind):
    value = _as_value(value)
    if value.type == kind:
        return value
    if kind == "bool":
        return _compare("!=", value, 0)
    return Value(f"{kind}({value.text})", _ATOM, kind)


def _filled(fill, dtype, like):
    kind = _dtype_kind(dtype) if dtype is not None else like.type
    if kind is None:
        _fail(f"unsupported dtype {dtype!r}")
    if kind == "bool":
        return _literal(bool(fill))
    return _literal(int(fill) if kind == "int" else float(fill))


def _call1(name, a, keep_type=False):
    a = _number_of(_as_value(a))
    return Value(f"{name}({a.text})", _ATOM, a.type if keep_type else "float")


def _traced(*args):
    return any(isinstance(a, Value) for a in args) or (
        getattr(_state, "tracer", None) is not None and
        any(_state.tracer.is_capture(a) for a in args))


def _torch_of(*args):
    torch = sys.modules.get("torch")
    if torch is not None and any(isinstance(a, torch.Tensor) for a in args):
        return torch
    return None


def _elementwise(name, python):
    """A function of flexjit's own namespace: traces on traced values, calls torch's function on
    tensors, and Python's on plain numbers (so a mask_mod written with it runs anywhere)."""

    def function(x):
        if _traced(x):
            if name in ("floor", "ceil") and _as_value(x).type == "int":
                return _as_value(x)  # torch keeps an integer tensor integral
            return _call1(name, x)
        torch = _torch_of(x)
        if torch is not None:
            return getattr(torch, name)(x)
        return python(float(x))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"{name}(x), traced as the language's {name} (float)."
    return function


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= -700 else 0.0


def _log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def _log2(x):
    return math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


tanh = _elementwise("tanh", math.tanh)
exp = _elementwise("exp", math.exp)
exp2 = _elementwise("exp2", lambda x: 2.0 ** x)
log = _elementwise("log", _log)
log2 = _elementwise("log2", _log2)
sqrt = _elementwise("sqrt", _sqrt)
sigmoid = _elementwise("sigmoid", _sigmoid)
floor = _elementwise("floor", math.floor)
ceil = _elementwise("ceil", math.ceil)


def where(condition, x, y):
    """torch.where(condition, x, y) for traced values, tensors and plain numbers."""
    if _traced(condition, x, y):
        c = _bool_of(condition)
        a, b = _as_value(x), _as_value(y)
        if (a.type == "bool") != (b.type == "bool"):
            a, b = _number_of(a), _number_of(b)
        type_ = "bool" if a.type == "bool" else _common(a, b)
        return Value(f"where({c.text}, {a.text}, {b.text})", _ATOM, type_)
    torch = _torch_of(condition, x, y)
    if torch is not None:
        return torch.where(condition, x, y)
    return x if condition else y


def minimum(x, y):
    """torch.minimum for traced values, tensors and plain numbers."""
    if _traced(x, y):
        a, b = _number_of(_as_value(x)), _number_of(_as_value(y))
        return Value(f"min({a.text}, {b.text})", _ATOM, _common(a, b))
    torch = _torch_of(x, y)
    return torch.minimum(x, y) if torch is not None else min(x, y)


def maximum(x, y):
    """torch.maximum for traced values, tensors and plain numbers."""
    if _traced(x, y):
        a, b = _number_of(_as_value(x)), _number_of(_as_value(y))
        return Value(f"max({a.text}, {b.text})", _ATOM, _common(a, b))
    torch = _torch_of(x, y)
    return torch.maximum(x, y) if torch is not None else max(x, y)


def clamp(x, min=None, max=None):
    """torch.clamp(x, min, max) for traced values, tensors and plain numbers; either bound may
    be None."""
    if _traced(x, min, max):
        if min is not None and max is not None:
            a, lo, hi = (_number_of(_as_value(v)) for v in (x, min, max))
            type_ = "float" if "float" in (a.type, lo.type, hi.type) else "int"
            return Value(f"clamp({a.text}, {lo.text}, {hi.text})", _ATOM, type_)
        if min is not None:
            return maximum(x, min)
        if max is not None:
            return minimum(x, max)
        _fail("clamp() without a bound")
    torch = _torch_of(x, min, max)
    if torch is not None:
        return torch.clamp(x, min, max)
    if min is not None:
        x = x if x >= min else min
    if max is not None:
        x = x if x <= max else max
    return x


def and_masks(*mask_mods):
    """The mask visible where every one of `mask_mods` is (torch's and_masks); no mask: all."""

    def and_mask(b, h, q_idx, kv_idx):
        result = True
        for mask_mod in mask_mods:
            result = result & mask_mod(b, h, q_idx, kv_idx)
        return result

    and_mask._flexjit_composition = True
    return and_mask


def or_masks(*mask_mods):
    """The mask visible where any one of `mask_mods` is (torch's or_masks); no mask: none."""

    def or_mask(b, h, q_idx, kv_idx):
        result = False
        for mask_mod in mask_mods:
            result = result | mask_mod(b, h, q_idx, kv_idx)
        return result

    or_mask._flexjit_composition = True
    return or_mask


# ---- Captured values ------------------------------------------------------------------------

def _is_torch_tensor(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _array_info(obj):
    """(rank, element kind 'int' | 'float' | 'bool') of a tensor-like capture, or None."""
    if _is_torch_tensor(obj):
        kind = "bool" if str(obj.dtype) == "torch.bool" else \
            "float" if obj.is_floating_point() else "int"
        return obj.dim(), kind
    interface = getattr(obj, "__array_interface__", None)
    if isinstance(interface, dict) and "typestr" in interface:
        code = interface["typestr"][1:2]
        kind = "float" if code == "f" else "bool" if code == "b" else "int"
        return len(interface["shape"]), kind
    return None


def _capture_kind(obj):
    """How a captured object enters a trace: 'number', 'runtime', 'array', 'function',
    'functions' (a tuple or list of them) or None (left as it is)."""
    if isinstance(obj, (bool, numbers.Integral, numbers.Real)) and not isinstance(obj, Value) \
            and not _is_torch_tensor(obj) and _array_info(obj) is None:
        return "number"
    if isinstance(obj, Runtime):
        return "runtime"
    if _array_info(obj) is not None:
        return "array"
    if _user_function(obj):
        return "function"
    if isinstance(obj, (tuple, list)) and obj and all(_user_function(f) for f in obj):
        return "functions"
    return None


def _user_function(obj):
    """Whether `obj` is a Python function whose captures a trace walks: the user's, and the
    compositions of and_masks / or_masks; not flexjit's or torch's own functions."""
    if not isinstance(obj, types.FunctionType):
        return False
    module = obj.__module__ or ""
    if module == "flexjit" or module.startswith(("flexjit.", "torch")):
        return getattr(obj, "_flexjit_composition", False)
    return True


def _key_of(obj, depth=0):
    """The part of the trace cache key of one captured object: numbers by type and value,
    runtime numbers by type, arrays by rank and element kind, functions by their code and what
    they capture; modules by name; anything else by identity."""
    kind = _capture_kind(obj)
    if kind == "number":
        return ("number", type(obj).__name__, obj)
    if kind == "runtime":
        return ("runtime", type(obj.value).__name__)
    if kind == "array":
        return ("array",) + _array_info(obj)
    if kind == "function":
        return _function_key(obj, depth + 1)
    if kind == "functions":
        return ("functions",) + tuple(_function_key(f, depth + 1) for f in obj)
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    return ("object", _Identity(obj))


class _Identity:
    """A key part equal only to itself, holding its object (whose id is then not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Identity) and other.obj is self.obj


def _function_key(fn, depth=0):
    if depth > 16:
        raise TraceError(f"{fn.__qualname__}: functions nest more than 16 deep")
    code = fn.__code__
    cells = tuple(_key_of(_cell_contents(c), depth) for c in (fn.__closure__ or ()))
    names = tuple((name, _key_of(fn.__globals__[name], depth)) for name in _global_names(code)
                  if name in fn.__globals__)
    defaults = tuple(_key_of(d, depth) for d in (fn.__defaults__ or ()))
    return ("function", code, cells, names, defaults)


def _global_names(code):
    """The names `code` and the code nested in it (comprehensions, lambdas) may read as
    globals."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += [n for n in _global_names(const) if n not in names]
    return names


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a variable assigned after the function was made)
        return None


class Binding(NamedTuple):
    """A runtime parameter of a traced program and where its launch value comes from.

    kind: 'scalar' (a Runtime's value), 'array' (a tensor's elements), 'extent' (dimension
    `dim` of an array's tensor, for a 3-D/4-D one flattened). root: 'mask' or 'score', the
    function whose captures `path` walks (('cell', i), ('global', name), ('item', i) steps);
    `obj` holds the object itself when it was met without a path (then the trace is not
    cached). rank and element ('int', 'float', 'bool') describe an array."""

    name: str
    kind: str
    root: str
    path: Tuple
    obj: object
    rank: int
    element: str
    dim: int


class TracedProgram(NamedTuple):
    """The result of tracing: the program's source, the names of its mask and score (None: no
    score), and the runtime parameters to fill at each launch."""

    source: str
    mask: str
    score: Optional[str]
    bindings: Tuple[Binding, ...]
    cacheable: bool

    def resolve(self, binding, mask_mod, score_mod):
        """The object `binding` reads, found along its path from the functions of this call."""
        if binding.obj is not None:
            return binding.obj
        obj = mask_mod if binding.root == "mask" else score_mod
        for step, where_ in binding.path:
            if step == "cell":
                obj = _cell_contents(obj.__closure__[where_])
            elif step == "global":
                obj = obj.__globals__[where_]
            else:
                obj = obj[where_]
        return obj

    def launch_values(self, mask_mod, score_mod):
        """({scalar param: value}, {array param: (captured object, rank, element)}) of one
        call: Runtime values, the extents of flattened arrays, and the captured tensors."""
        params, arrays = {}, {}
        for binding in self.bindings:
            obj = self.resolve(binding, mask_mod, score_mod)
            if binding.kind == "scalar":
                params[binding.name] = obj.value
            elif binding.kind == "extent":
                params[binding.name] = int(_shape_of(obj)[binding.dim])
            else:
                arrays[binding.name] = (obj, binding.rank, binding.element)
        return params, arrays


def _shape_of(obj):
    if _is_torch_tensor(obj):
        return tuple(obj.shape)
    return tuple(obj.__array_interface__["shape"])


class _Array:
    """A captured tensor while tracing: indexing it reads the array parameter."""

    def __init__(self, tracer, decl):
        self._tracer, self._decl = tracer, decl

    def __getitem__(self, index):
        return self._tracer.read(self._decl, index if isinstance(index, tuple) else (index,))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        _fail(f"unsupported use of captured tensor {self._decl.name!r}: .{name} (only "
              f"indexing by b, h, q_idx, kv_idx and integers is traced)")

    def __bool__(self):
        _fail(f"captured tensor {self._decl.name!r} used as a Python truth value")


class _Partial:
    """t[i] of a tensor of more dimensions: waits for the remaining indices (t[i][j])."""

    def __init__(self, tracer, decl, indices):
        self._tracer, self._decl, self._indices = tracer, decl, indices

    def __getitem__(self, index):
        more = index if isinstance(index, tuple) else (index,)
        return self._tracer.read(self._decl, self._indices + more)


class _ArrayDecl:
    def __init__(self, name, rank, element, binding_args):
        self.name, self.rank, self.element = name, rank, element
        self.binding_args = binding_args  # (root, path, obj)
        self.dim_uses = [set() for _ in range(min(rank, 2))]
        self.extents = []


class Tracer:
    """One trace of a mask_mod and/or a score_mod into one program."""

    def __init__(self):
        self.consts = {}  # name -> (type, literal text)
        self.scalars = {}  # name -> type
        self.arrays = []  # _ArrayDecl
        self.extents = []  # (name, array name)
        self.bindings = []
        self.names = set()
        self.by_identity = {}  # id(obj) -> Value or _Array (one declaration per object)
        self.keep = []  # objects whose ids are keys above
        self.role = None
        self.root = None
        self.cacheable = True

    def fresh(self, wanted):
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in wanted) or "v"
        if name[0].isdigit():
            name = "v" + name
        if name in _RESERVED:
            name += "_"
        base, n = name, 1
        while name in self.names:
            name, n = f"{base}_{n}", n + 1
        self.names.add(name)
        return name

    # -- what the function captures --
    def substitute(self, fn, path, depth=0):
        """A copy of `fn` whose captured numbers, Runtime wrappers and tensors are traced
        stand-ins (and whose captured functions are such copies in turn)."""
        if depth > 16:
            raise TraceError(f"{fn.__qualname__}: functions nest more than 16 deep")
        code = fn.__code__
        cells = []
        for i, cell in enumerate(fn.__closure__ or ()):
            obj = _cell_contents(cell)
            name = code.co_freevars[i]
            cells.append(types.CellType(self.stand_in(obj, name, path + (("cell", i),), depth)))
        replaced = {}
        for name in _global_names(code):
            if name in fn.__globals__:
                obj = fn.__globals__[name]
                stand_in = self.stand_in(obj, name, path + (("global", name),), depth)
                if stand_in is not obj:
                    replaced[name] = stand_in
        new_globals = fn.__globals__
        if replaced:
            new_globals = dict(fn.__globals__)
            new_globals.update(replaced)
        copy = types.FunctionType(code, new_globals, fn.__name__, fn.__defaults__,
                                  tuple(cells) if fn.__closure__ else None)
        copy.__kwdefaults__ = fn.__kwdefaults__
        return copy

    def stand_in(self, obj, name, path, depth):
        kind = _capture_kind(obj)
        if kind is None:
            return obj
        if kind == "function":
            return self.substitute(obj, path, depth + 1)
        if kind == "functions":
            items = [self.substitute(f, path + (("item", i),), depth + 1)
                     for i, f in enumerate(obj)]
            return tuple(items) if isinstance(obj, tuple) else items
        # One declaration per path, even for an object met along two: a cached trace serves
        # later calls whose paths may hold different objects.
        if kind == "number":
            return self.const(name, obj)
        if kind == "runtime":
            value = _literal(obj.value)
            param = self.fresh(name)
            self.scalars[param] = value.type
            self.bindings.append(Binding(param, "scalar", self.root, path, None, 0, value.type, 0))
            return Value(param, _ATOM, value.type)
        return self.array(name, obj, self.root, path, None)

    def const(self, name, value):
        literal = _literal(value)
        for existing, (type_, text) in self.consts.items():
            if existing.rstrip("_0123456789") == name.rstrip("_0123456789") and \
                    (type_, text) == (literal.type, literal.text):
                return Value(existing, _ATOM, type_)
        const = self.fresh(name)
        self.consts[const] = (literal.type, literal.text)
        return Value(const, _ATOM, literal.type)

    def array(self, name, obj, root, path, held):
        rank, element = _array_info(obj)
        param = self.fresh(name)
        if rank == 0:
            # A 0-d tensor: a runtime number, as a one-element array (no host synchronisation).
            decl = _ArrayDecl(param, 1, element, (root, path, held))
            decl.dim_uses = [{"free"}]
            self.arrays.append(decl)
            self.bindings.append(Binding(param, "array", root, path, held, 0, element, 0))
            return self.element_value(decl, f"{param}[0]")
        if rank > 4:
            _fail(f"captured tensor {name!r} has {rank} dimensions (at most 4 are supported)")
        decl = _ArrayDecl(param, rank, element, (root, path, held))
        self.arrays.append(decl)
        self.bindings.append(Binding(param, "array", root, path, held, rank, element, 0))
        if rank > 2:
            for dim in range(1, rank):
                extent = self.fresh(f"{param}_n{dim}")
                self.scalars[extent] = "int"
                decl.extents.append(extent)
                self.bindings.append(Binding(extent, "extent", root, path, held, rank, "int",
                                             dim))
        return _Array(self, decl)

    def element_value(self, decl, text):
        value = Value(text, _ATOM, "float" if decl.element == "float" else "int")
        return _compare("!=", value, 0) if decl.element == "bool" else value

    def is_capture(self, obj):
        return isinstance(obj, (_Array, _Partial)) or _is_torch_tensor(obj) or \
            isinstance(obj, Runtime)

    def capture_scalar(self, obj):
        """A tensor or Runtime met while tracing, not through a captured name (an attribute,
        an item): declared here, held by the program (which is then traced at every call)."""
        if isinstance(obj, Runtime) or (_is_torch_tensor(obj) and obj.dim() == 0):
            known = self.by_identity.get(id(obj))
            if known is None:
                self.cacheable = False
                if isinstance(obj, Runtime):
                    value = _literal(obj.value)
                    param = self.fresh("runtime")
                    self.scalars[param] = value.type
                    self.bindings.append(Binding(param, "scalar", self.root, (), obj, 0,
                                                 value.type, 0))
                    known = Value(param, _ATOM, value.type)
                else:
                    known = self.array("t", obj, self.root, (), obj)
                self.by_identity[id(obj)] = known
                self.keep.append(obj)
            return known
        return None

    def captured_tensor(self, obj):
        known = self.by_identity.get(id(obj))
        if known is None:
            self.cacheable = False
            known = self.array("t", obj, self.root, (), obj)
            self.by_identity[id(obj)] = known
            self.keep.append(obj)
        return known

    # -- reading arrays --
    def read(self, decl, indices):
        for index in indices:
            if index is None or index is Ellipsis or isinstance(index, slice):
                _fail(f"slicing captured tensor {decl.name!r} (index every dimension with an "
                      f"integer expression)")
        if len(indices) < decl.rank:
            return _Partial(self, decl, tuple(indices))
        if len(indices) > decl.rank:
            _fail(f"captured tensor {decl.name!r} has {decl.rank} dimensions, indexed with "
                  f"{len(indices)}")
        values = []
        for index in indices:
            if isinstance(index, numbers.Integral) and not isinstance(index, bool) and index < 0:
                _fail(f"negative index {int(index)} into captured tensor {decl.name!r}: torch "
                      f"counts it from the end, flexjit reads 0 outside an array; write the "
                      f"position from the start")
            value = _as_value(index)
            if value.type != "int":
                _fail(f"index of captured tensor {decl.name!r} is {value.type}, not an integer")
            values.append(value)
        if decl.rank <= 2:
            for d, value in enumerate(values):
                decl.dim_uses[d].add(value.text if value.text in ("b", "h", "q", "kv")
                                     else "free")
            return self.element_value(decl, f"{decl.name}[{', '.join(v.text for v in values)}]")
        # Flattened: [i0, ((i1 * n2 + i2) * n3 + i3)], each inner index checked against its
        # extent, since out of range must read 0 rather than a neighbouring element.
        decl.dim_uses[0].add(values[0].text if values[0].text in ("b", "h", "q", "kv")
                             else "free")
        decl.dim_uses[1].add("free")
        extents = [Value(e, _ATOM, "int") for e in decl.extents]
        column = values[1]
        for value, extent in zip(values[2:], extents[1:]):
            column = _arith("+", _arith("*", column, extent), value)
        inside = None
        for value, extent in zip(values[1:], extents):
            check = _logic("&", _compare(">=", value, 0), _compare("<", value, extent))
            inside = check if inside is None else _logic("&", inside, check)
        element = self.element_value(decl, f"{decl.name}[{values[0].text}, {column.text}]")
        zero = _literal(False if element.type == "bool" else
                        0.0 if element.type == "float" else 0)
        return where(inside, element, zero)

    # -- the program --
    def declarations(self):
        lines = []
        for name, (type_, text) in self.consts.items():
            lines.append(f"const {name}: {type_} = {text}")
        for name, type_ in self.scalars.items():
            lines.append(f"param {name}: {type_}")
        for decl in self.arrays:
            dims = []
            for d, uses in enumerate(decl.dim_uses):
                if len(uses) == 1 and next(iter(uses)) in ("b", "h"):
                    dims.append(next(iter(uses)))
                elif uses and uses <= {"q", "kv"}:
                    dims.append("kv" if "kv" in uses else "q")
                else:
                    dims.append(f"n{d}")
            element = "float" if decl.element == "float" else "int"
            lines.append(f"param {decl.name}: {element}[{', '.join(dims)}]")
        return lines


_B = Value("b", _ATOM, "int")
_H = Value("h", _ATOM, "int")
_Q = Value("q", _ATOM, "int")
_KV = Value("kv", _ATOM, "int")
_SCORE = Value("score", _ATOM, "float")


def _call_traced(tracer, role, fn, args):
    tracer.role = f"{role} {getattr(fn, '__qualname__', type(fn).__name__)}"
    tracer.root = role
    if isinstance(fn, types.FunctionType):
        fn = tracer.substitute(fn, ())
    else:
        tracer.cacheable = False  # a callable object: its captures are not walked
    return fn(*args)


def _where_defined(fn):
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", type(fn).__name__)
    return f"{fn.__qualname__}, {code.co_filename}:{code.co_firstlineno}"


def _decl_name(fn, default):
    name = getattr(fn, "__name__", default)
    return default if name == "<lambda>" else name


def trace(mask_mod=None, score_mod=None):
    """Traces `mask_mod(b, h, q_idx, kv_idx)` and `score_mod(score, b, h, q_idx, kv_idx)` (either
    may be None) into one TracedProgram. Raises TraceError for what the language cannot express.
    """
    tracer = Tracer()
    previous = getattr(_state, "tracer", None)
    _state.tracer = tracer
    try:
        mask_text = "true"
        if mask_mod is not None:
            result = _call_traced(tracer, "mask", mask_mod, (_B, _H, _Q, _KV))
            value = _literal(result) if not isinstance(result, Value) else result
            if value is None or value.type != "bool":
                kind = value.type if value is not None else type(result).__name__
                raise TraceError(f"{_where_defined(mask_mod)}: a mask_mod must return a boolean, returned "
                                 f"{kind}" + (f" ({value.text})" if value is not None else ""))
            mask_text = value.text
        score_text = None
        if score_mod is not None:
            result = _call_traced(tracer, "score", score_mod, (_SCORE, _B, _H, _Q, _KV))
            value = _literal(result) if not isinstance(result, Value) else result
            if value is None or value.type == "bool":
                kind = value.type if value is not None else type(result).__name__
                raise TraceError(f"{_where_defined(score_mod)}: a score_mod must return a number, returned "
                                 f"{kind}")
            score_text = value.text
    finally:
        _state.tracer = previous
    mask_name = tracer.fresh(_decl_name(mask_mod, "mask_mod") if mask_mod else "all_visible")
    score_name = tracer.fresh(_decl_name(score_mod, "score_mod")) if score_mod else None
    lines = ["# Traced by flexjit from Python (flexjit.trace)."] + tracer.declarations()
    lines.append(f"mask {mask_name} = {mask_text}")
    if score_name:
        lines.append(f"score {score_name} = {score_text}")
    return TracedProgram("\n".join(lines) + "\n", mask_name, score_name, tuple(tracer.bindings),
                         tracer.cacheable)


def to_source(mask_mod=None, score_mod=None):
    """The flexjit language text of the traced functions (what `flexjit check|hints|emit`
    read)."""
    return trace(mask_mod, score_mod).source


def cache_key(mask_mod, score_mod):
    """The trace cache's key of a pair of functions: their code and the structure of what they
    capture (numbers by value, tensors by rank and element kind); None for callables other than
    Python functions, which are traced at every call."""
    key = []
    for fn in (mask_mod, score_mod):
        if fn is None:
            key.append(None)
        elif isinstance(fn, types.FunctionType):
            key.append(_function_key(fn))
        else:
            return None
    return tuple(key)


# ---- torch functions --------------------------------------------------------------------------

_TORCH_TABLE = None


def _torch_table(torch):
    global _TORCH_TABLE
    if _TORCH_TABLE is None:
        T = torch.Tensor
        table = {
            torch.where: lambda c, x=None, y=None: where(c, x, y),
            torch.abs: abs, T.abs: abs, T.__abs__: abs,
            torch.minimum: minimum, torch.maximum: maximum,
            torch.clamp: clamp, torch.clip: clamp,
            torch.tanh: tanh, torch.exp: exp, torch.exp2: exp2, torch.log: log,
            torch.log2: log2, torch.sqrt: sqrt, torch.sigmoid: sigmoid, torch.floor: floor,
            torch.ceil: ceil,
            torch.logical_and: lambda a, b: _logic("&", _bool_of(a), _bool_of(b)),
            torch.logical_or: lambda a, b: _logic("|", _bool_of(a), _bool_of(b)),
            torch.logical_xor: lambda a, b: _logic("^", _bool_of(a), _bool_of(b)),
            torch.logical_not: lambda a: ~_bool_of(a),
            torch.zeros_like: lambda x, dtype=None, **k: _filled(0, dtype, _as_value(x)),
            torch.ones_like: lambda x, dtype=None, **k: _filled(1, dtype, _as_value(x)),
            torch.full_like: lambda x, v, dtype=None, **k: _filled(v, dtype, _as_value(x)),
        }
        for name, function in (("add", _arith_op("+")), ("sub", _arith_op("-")),
                               ("mul", _arith_op("*")), ("truediv", _truediv),
                               ("div", _truediv), ("floordiv", _floordiv),
                               ("mod", _arith_op("%")), ("remainder", _arith_op("%")),
                               ("lt", _cmp_op("<")), ("le", _cmp_op("<=")),
                               ("gt", _cmp_op(">")), ("ge", _cmp_op(">=")),
                               ("eq", _cmp_op("==")), ("ne", _cmp_op("!=")),
                               ("and", _bitwise_op("&")), ("or", _bitwise_op("|")),
                               ("xor", _bitwise_op("^")), ("lshift", _bitwise_op("<<")),
                               ("rshift", _bitwise_op(">>")),
                               ("bitwise_and", _bitwise_op("&")),
                               ("bitwise_or", _bitwise_op("|")),
                               ("bitwise_xor", _bitwise_op("^")),
                               ("bitwise_left_shift", _bitwise_op("<<")),
                               ("bitwise_right_shift", _bitwise_op(">>"))):
            for attr in (f"__{name}__", name):
                if hasattr(T, attr):
                    table[getattr(T, attr)] = function
            if hasattr(T, f"__r{name}__"):
                table[getattr(T, f"__r{name}__")] = (lambda f: lambda a, b: f(b, a))(function)
            if hasattr(torch, name):
                table[getattr(torch, name)] = function
        table[T.__getitem__] = _tensor_getitem
        table[T.__neg__] = lambda a: -_tensor_operand(a)
        table[torch.neg] = table[T.__neg__]
        table[T.__invert__] = lambda a: _invert(_tensor_operand(a))
        for owner in (T, torch):
            if hasattr(owner, "bitwise_not"):
                table[owner.bitwise_not] = table[T.__invert__]
        _TORCH_TABLE = table
    return _TORCH_TABLE


def _tensor_operand(obj):
    tracer = getattr(_state, "tracer", None)
    if tracer is not None and _is_torch_tensor(obj):
        value = tracer.capture_scalar(obj)
        if value is None:
            _fail("a captured tensor with dimensions used as a number (index it)")
        return value
    return _as_value(obj)


def _arith_op(op):
    return lambda a, b: _arith(op, _tensor_operand(a), _tensor_operand(b))


def _cmp_op(op):
    return lambda a, b: _compare(op, _tensor_operand(a), _tensor_operand(b))


def _bitwise_op(op):
    return lambda a, b: _bitwise(op, _tensor_operand(a), _tensor_operand(b))


def _tensor_getitem(tensor, index):
    tracer = getattr(_state, "tracer", None)
    if tracer is None:
        _fail("a tensor indexed by a traced value outside a trace")
    array = tracer.captured_tensor(tensor)
    if isinstance(array, Value):  # a 0-d tensor
        _fail("indexing a 0-d tensor")
    return array[index]


def _torch_function(func, args, kwargs):
    torch = sys.modules["torch"]
    function = _torch_table(torch).get(func)
    if function is None:
        name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
        _fail(f"torch function {name} is not supported in a traced function (docs/python.md "
              f"lists what is)")
    tracer = getattr(_state, "tracer", None)
    args = tuple(_tensor_operand(a) if tracer is not None and _is_torch_tensor(a) and
                 a.dim() == 0 else a for a in args)
    kwargs = {k: (_tensor_operand(v) if tracer is not None and _is_torch_tensor(v) and
                  v.dim() == 0 else v) for k, v in kwargs.items()}
    return function(*args, **kwargs)
