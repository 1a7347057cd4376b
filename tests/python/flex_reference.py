"""What the flex_attention tests compare against, without numpy or torch: host arrays for the
CPU backend, torch-like scalars to evaluate a user's mask_mod / score_mod on concrete integers,
and float64 attention."""

import ctypes
import math
import numbers
import struct

_FORMATS = {"<f2": "e", "<f4": "f", "<i4": "i"}


class HostArray:
    """A C-contiguous host array with __array_interface__ (16-byte aligned), indexable like a
    torch tensor by concrete integers (negative indices count from the end, as in torch)."""

    def __init__(self, shape, typestr, values=None):
        self.shape, self.typestr = tuple(shape), typestr
        self.format = _FORMATS[typestr]
        self.size = 1
        for n in self.shape:
            self.size *= n
        item = struct.calcsize(self.format)
        self._buffer = (ctypes.c_char * (self.size * item + 16))()
        self.ptr = ctypes.addressof(self._buffer) + (-ctypes.addressof(self._buffer)) % 16
        self.set(values if values is not None else [0] * self.size)

    @property
    def __array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def set(self, values):
        data = struct.pack(f"<{self.size}{self.format}", *values)
        ctypes.memmove(self.ptr, data, len(data))

    def values(self):
        item = struct.calcsize(self.format)
        return list(struct.unpack(f"<{self.size}{self.format}",
                                  ctypes.string_at(self.ptr, self.size * item)))

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        if len(index) != len(self.shape):
            raise IndexError(f"{len(index)} indices for {len(self.shape)} dimensions")
        offset = 0
        for i, n in zip(index, self.shape):
            i = int(i)
            if i < -n or i >= n:
                raise IndexError(f"index {i} out of range for extent {n}")
            offset = offset * n + (i % n)
        item = struct.calcsize(self.format)
        value = struct.unpack(f"<{self.format}",
                              ctypes.string_at(self.ptr + offset * item, item))[0]
        return Scalar(value)


def _unwrap(x):
    if isinstance(x, HostArray) and x.shape == ():
        return x.values()[0]  # a 0-d tensor in arithmetic
    return x.v if isinstance(x, Scalar) else x


def _arith(a, b):
    a, b = _unwrap(a), _unwrap(b)
    return (int(a) if isinstance(a, bool) else a), (int(b) if isinstance(b, bool) else b)


class Scalar:
    """A 0-d tensor stand-in: Python arithmetic with torch's rules where Python's differ (`/` is
    true division, `~` of a bool is not, & | ^ of bools are bools)."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v.v if isinstance(v, Scalar) else v

    def __repr__(self):
        return f"Scalar({self.v!r})"

    def __bool__(self):
        return bool(self.v)

    def __index__(self):
        if isinstance(self.v, float):
            raise TypeError("a float index")
        return int(self.v)

    def __int__(self):
        return int(self.v)

    def __float__(self):
        return float(self.v)

    def __add__(self, o):
        a, b = _arith(self, o)
        return Scalar(a + b)

    def __radd__(self, o):
        a, b = _arith(o, self)
        return Scalar(a + b)

    def __sub__(self, o):
        a, b = _arith(self, o)
        return Scalar(a - b)

    def __rsub__(self, o):
        a, b = _arith(o, self)
        return Scalar(a - b)

    def __mul__(self, o):
        a, b = _arith(self, o)
        return Scalar(a * b)

    def __rmul__(self, o):
        a, b = _arith(o, self)
        return Scalar(a * b)

    def __truediv__(self, o):
        a, b = _arith(self, o)
        return Scalar(a / b)

    def __rtruediv__(self, o):
        a, b = _arith(o, self)
        return Scalar(a / b)

    def __floordiv__(self, o):
        a, b = _arith(self, o)
        return Scalar(a // b if isinstance(a, int) and isinstance(b, int) else
                      float(math.floor(a / b)))

    def __rfloordiv__(self, o):
        return Scalar(o).__floordiv__(self)

    def __mod__(self, o):
        a, b = _arith(self, o)
        return Scalar(a % b)

    def __rmod__(self, o):
        a, b = _arith(o, self)
        return Scalar(a % b)

    def __pow__(self, o):
        a, b = _arith(self, o)
        return Scalar(a ** b)

    def __rpow__(self, o):
        a, b = _arith(o, self)
        return Scalar(a ** b)

    def __neg__(self):
        return Scalar(-self.v)

    def __abs__(self):
        return Scalar(abs(self.v))

    def __lt__(self, o):
        return Scalar(self.v < _unwrap(o))

    def __le__(self, o):
        return Scalar(self.v <= _unwrap(o))

    def __gt__(self, o):
        return Scalar(self.v > _unwrap(o))

    def __ge__(self, o):
        return Scalar(self.v >= _unwrap(o))

    def __eq__(self, o):
        return Scalar(self.v == _unwrap(o))

    def __ne__(self, o):
        return Scalar(self.v != _unwrap(o))

    __hash__ = None

    def __and__(self, o):
        return Scalar(self.v & _unwrap(o))

    __rand__ = __and__

    def __or__(self, o):
        return Scalar(self.v | _unwrap(o))

    __ror__ = __or__

    def __xor__(self, o):
        return Scalar(self.v ^ _unwrap(o))

    __rxor__ = __xor__

    def __lshift__(self, o):
        return Scalar(self.v << _unwrap(o))

    def __rlshift__(self, o):
        return Scalar(_unwrap(o) << self.v)

    def __rshift__(self, o):
        return Scalar(self.v >> _unwrap(o))

    def __rrshift__(self, o):
        return Scalar(_unwrap(o) >> self.v)

    def __invert__(self):
        return Scalar(not self.v) if isinstance(self.v, bool) else Scalar(~self.v)

    def float(self):
        return Scalar(float(self.v))

    def int(self):
        return Scalar(int(self.v))

    long = int

    def bool(self):
        return Scalar(bool(self.v))

    def abs(self):
        return abs(self)


def as_float(x):
    x = _unwrap(x)
    return float(x) if isinstance(x, numbers.Real) else float(x)


def dense_mask(mask_mod, batch, heads, q_len, kv_len):
    """mask[b][h][i][j]: the user's mask_mod on concrete integers (True where visible)."""
    if mask_mod is None:
        return [[[[True] * kv_len for _ in range(q_len)] for _ in range(heads)]
                for _ in range(batch)]
    return [[[[bool(mask_mod(Scalar(b), Scalar(h), Scalar(i), Scalar(j))) for j in range(kv_len)]
              for i in range(q_len)] for h in range(heads)] for b in range(batch)]


def attention(q, k, v, shape, mask, score_mod=None, scale=None, sinks=None):
    """float64 attention of flat [B, Hq, Sq, D] / [B, Hkv, Skv, D] value lists: (out, lse), out
    flat like q, lse [b][h][i] (-inf and a zero row where nothing is visible). `sinks`: a logit
    per query head that joins each row's softmax denominator with no value (a row that sees
    nothing then has lse = the sink), or None."""
    batch, heads, kv_heads, q_len, kv_len, dim = shape
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    group = heads // kv_heads
    out = [0.0] * (batch * heads * q_len * dim)
    lse = [[[-math.inf] * q_len for _ in range(heads)] for _ in range(batch)]
    for b in range(batch):
        for h in range(heads):
            kh = h // group
            for i in range(q_len):
                qrow = q[((b * heads + h) * q_len + i) * dim:][:dim]
                scores = []
                for j in range(kv_len):
                    if not mask[b][h][i][j]:
                        continue
                    base = ((b * kv_heads + kh) * kv_len + j) * dim
                    s = scale * sum(x * y for x, y in zip(qrow, k[base:base + dim]))
                    if score_mod is not None:
                        s = as_float(score_mod(Scalar(s), Scalar(b), Scalar(h), Scalar(i),
                                               Scalar(j)))
                    scores.append((j, s))
                sink = -math.inf if sinks is None else sinks[h]
                if not scores and sink == -math.inf:
                    continue
                top = max([s for _, s in scores] + [sink])
                total = sum(math.exp(s - top) for _, s in scores) + math.exp(sink - top)
                lse[b][h][i] = top + math.log(total)
                row = ((b * heads + h) * q_len + i) * dim
                for j, s in scores:
                    p = math.exp(s - top) / total
                    base = ((b * kv_heads + kh) * kv_len + j) * dim
                    for d in range(dim):
                        out[row + d] += p * v[base + d]
    return out, lse
