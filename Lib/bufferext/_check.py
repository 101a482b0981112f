"""Conformance report for any producer: ``python -m bufferext check MOD:ATTR``.

It says which exchange protocols an object speaks, compares what its
``__buffer_supported_flags__`` claims with what its exporter does for every
PEP 3118 request, and makes sure device memory is never handed to a plain
(CPU-only) request.  Findings are ``ok``, ``info``, ``warning`` or
``violation``; a report with a violation fails (a warning does not).
Memory is never read.
"""

from __future__ import annotations

import builtins
import importlib
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import _bufferext
from ._bridges import BRIDGED
from ._dtypes import describe
from ._flags import BufferFlags as F

__all__ = ["Finding", "Report", "check", "check_class", "load_target", "format_report"]

_REQUIRED_BITS = (F.WRITABLE, F.FORMAT, F.ND, F.STRIDES, F.C_CONTIGUOUS,
                  F.F_CONTIGUOUS, F.ANY_CONTIGUOUS, F.INDIRECT)


def legacy_requests() -> List[int]:
    """Every distinct request CPython's PyBUF_* constants can form (the
    compound flags include their parts: STRIDES implies ND, ...)."""
    shapes = [F.SIMPLE, F.ND, F.STRIDES, F.C_CONTIGUOUS, F.F_CONTIGUOUS,
              F.ANY_CONTIGUOUS, F.INDIRECT]
    return sorted({int(shape | w | f) for shape in shapes
                   for w in (0, F.WRITABLE) for f in (0, F.FORMAT)})


def flag_names(flags: int) -> str:
    names = [bit.name for bit in (F.WRITABLE, F.FORMAT, F.ND, F.DEVICE)
             if flags & bit]
    for compound in (F.INDIRECT, F.ANY_CONTIGUOUS, F.F_CONTIGUOUS,
                     F.C_CONTIGUOUS, F.STRIDES):
        if flags & compound == compound:
            names.append(str(compound.name))
            break
    return "|".join(n for n in names if n) or "SIMPLE"


def mask_text(mask: int) -> str:
    """A flag mask as names and hex: ``LEGACY|DEVICE (0x101fd)``."""
    return f"{'|'.join(F(mask).names())} ({mask:#x})"


def declared_text(declared: Any) -> str:
    """A ``__buffer_supported_flags__`` value as the report shows it: the
    draft's two special values said in words, a mask as :func:`mask_text`;
    any other value is kept as its repr already (``_plain``)."""
    if isinstance(declared, str):
        return declared
    if isinstance(declared, bool) or not isinstance(declared, int):
        return repr(declared)
    if declared == 0:
        return "0 (the default: every legacy flag)"
    if declared == -1:
        return "-1 (SIMPLE only)"
    return mask_text(declared) if declared > 0 else repr(declared)


@dataclass
class Finding:
    """One line of the report."""

    level: str          # "ok", "info", "warning" or "violation"
    subject: str
    message: str


@dataclass
class Report:
    """What :func:`check` found about one object."""

    target: str
    type_name: str
    protocols: Dict[str, Any] = field(default_factory=dict)
    findings: List[Finding] = field(default_factory=list)
    #: ``"object"``, or ``"class"``: a class's declaration, no instance
    scope: str = "object"

    @property
    def conformant(self) -> bool:
        return not any(f.level == "violation" for f in self.findings)

    def add(self, level: str, subject: str, message: str) -> None:
        self.findings.append(Finding(level, subject, message))

    def as_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["conformant"] = self.conformant
        return out


#: Import aliases a target might use; the hint names the module instead.
_ALIASES = {"np": "numpy", "cp": "cupy", "jnp": "jax.numpy", "pa": "pyarrow",
            "pd": "pandas"}


class _Modules(Dict[str, Any]):
    """The namespace of a target expression: a free name is a builtin, else
    the module of that name, imported on first use."""

    def __missing__(self, name: str) -> Any:
        # eval looks names up here before it looks at the builtins
        if hasattr(builtins, name):
            return getattr(builtins, name)
        try:
            module = importlib.import_module(name)
        except ImportError:
            alias = _ALIASES.get(name)
            hint = f"; write {alias!r}: names are module names" if alias else ""
            raise NameError(f"name {name!r} is not defined (nor a module)"
                            f"{hint}") from None
        self[name] = module
        return module


def load_target(spec: str, call: bool = False) -> Any:
    """The object a target names.

    ``module:attr`` (a dotted attr allowed) is that attribute, as it is: a
    class or function is called, without arguments, only with ``call=True``.
    Anything else is a Python expression, evaluated with every free name
    bound to the module of that name (``bufferext.CPUBuffer((4,), "f4")``,
    ``numpy.zeros(3)``): it runs the code it says.
    """
    module_name, sep, attr = spec.partition(":")
    if sep and module_name.replace(".", "").isidentifier() and \
            attr.replace(".", "").isidentifier():
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    else:
        try:
            code = compile(spec, "<target>", "eval")
        except SyntaxError as exc:
            raise ValueError(f"expected MODULE:ATTR or a Python expression, "
                             f"not {spec!r} ({exc.msg})") from None
        obj = eval(code, _Modules())
    if call:
        if not callable(obj):
            raise TypeError(f"--call: {spec} is a "
                            f"{type(obj).__name__!r}, not callable")
        obj = obj()
    return obj


# ---- protocols ------------------------------------------------------------

def _class_protocols(cls: type, exports: bool, report: Report) -> None:
    """The protocols ``cls``'s instances speak, as its attributes say."""
    p = report.protocols
    p["buffer"] = exports
    native = _bufferext._native_declaration(cls)
    if native is not None:      # the interpreter's slot: 0 says nothing
        p["declared_supported_flags"] = native or None
    else:
        p["declared_supported_flags"] = _plain(cls.__dict__.get(
            "__buffer_supported_flags__",
            getattr(cls, "__buffer_supported_flags__", None)))
    p["typed_entry"] = _bufferext._has_typed_entry(cls)
    p["arrow_c_device_array"] = hasattr(cls, "__arrow_c_device_array__")
    p["arrow_c_array"] = hasattr(cls, "__arrow_c_array__")
    p["dlpack"] = hasattr(cls, "__dlpack__")
    p["dlpack_device"] = None
    p["dlpack_c_exchange_api"] = hasattr(cls, "__dlpack_c_exchange_api__")


def _plain(value: Any) -> Any:
    """A foreign value as the report keeps it: None, an int as the int it
    is (an int subclass's own methods are never run), anything else as
    its repr, read once here (a repr that raises is named by its type):
    what the report renders or copies runs no code of the target's."""
    if value is None or type(value) is int:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__index__(value)
    try:
        return repr(value)
    except Exception as exc:
        return (f"<a {type(value).__name__!r} whose repr raised "
                f"{type(exc).__name__}>")


def _protocols(obj: Any, report: Report) -> None:
    cls = type(obj)
    p = report.protocols
    _class_protocols(cls, bool(_bufferext.check_buffer_supports(obj)), report)
    if hasattr(cls, "__dlpack_device__"):   # looked up on the type, as Python does
        try:
            device = obj.__dlpack_device__()
        except Exception as exc:   # a report, not a crash
            report.add("violation", "dlpack",
                       f"__dlpack_device__() raised {exc!r}")
        else:
            if (type(device) is tuple and len(device) == 2 and
                    all(type(v) is int for v in device)):
                p["dlpack_device"] = device
            else:
                report.add("violation", "dlpack",
                           f"__dlpack_device__() returned {_plain(device)}, "
                           "not a tuple (device_type, device_id) of ints")
    for name, _ in BRIDGED[3:]:       # the array interfaces
        try:
            value = getattr(obj, name, None)
            version = (value.get("version") if isinstance(value, dict)
                       else None)
        except Exception as exc:
            version = None
            report.add("info", name, f"reading it raised {exc!r}")
        p[name.strip("_")] = _plain(version)


# ---- probing ------------------------------------------------------------------

#: How BufferExt_GetBuffer reports an exporter that wrote the extension
#: wrongly (Include/bufferext/core.h): a plain consumer's memory corrupted.
_EXTENSION_PROBLEMS = ("wrote the buffer extension", "not requested",
                       "without setting PyBUF_DEVICE",
                       # get_buffer's validation of every field (gate.c)
                       "exported an invalid buffer")


#: CPython's own error for a ``__buffer__`` method that returned something
#: else than a memoryview (typeobject.c; its words changed in 3.15): the
#: exporter's fault, no refusal.
_NOT_A_MEMORYVIEW = ("__buffer__ returned non-memoryview object",
                     "__buffer__() must return a memoryview")


def _refusal(exc: Exception) -> bool:
    """Whether a ValueError or TypeError from a request is the exporter's
    refusal (BufferError is the standard), not CPython's report of a
    ``__buffer__`` that broke the protocol."""
    return not (isinstance(exc, TypeError) and
                any(words in str(exc) for words in _NOT_A_MEMORYVIEW))


def _raised(exc: BaseException) -> str:
    """What an exporter that failed with another exception than a refusal
    did, for a violation."""
    return (f"the exporter raised {type(exc).__name__}: {exc} (an exporter "
            "answers a request or refuses it with BufferError)")


def _probe(obj: Any, request: int) -> Tuple[str, Any]:
    """("ok", view) | ("refused", exception) | ("violation", message)."""
    try:
        return "ok", _bufferext.get_buffer(obj, request)
    except BufferError as exc:
        if any(text in str(exc) for text in _EXTENSION_PROBLEMS):
            return "violation", str(exc)
        return "refused", exc
    except (ValueError, TypeError) as exc:
        if _refusal(exc):
            return "refused", exc
        return "violation", _raised(exc)
    except Exception as exc:        # the exporter's fault: a report, not a crash
        return "violation", _raised(exc)


# ---- the extended request and device safety ---------------------------------

#: The requests _where makes, widest first, each with PyBUF_DEVICE: an
#: exporter that refuses the widest (a narrow declaration, no INDIRECT) is
#: asked the next, so that its memory is found wherever it is.
_WHERE = (("FULL_RO", F.FULL_RO), ("STRIDED_RO", F.STRIDED_RO),
          ("CONTIG_RO", F.CONTIG_RO), ("FORMAT", F.FORMAT),
          ("SIMPLE", F.SIMPLE))


def _where(obj: Any, report: Report) -> Optional[str]:
    """The device (None for CPU memory) of the widest request with
    PyBUF_DEVICE the exporter answers (FULL_RO|DEVICE first)."""
    refused = ""                    # the widest request's refusal
    for name, request in _WHERE:
        name += "|DEVICE"
        try:
            with _bufferext.get_buffer(obj, request | F.DEVICE) as view:
                device, answered = view.device, bool(view.flags & F.DEVICE)
                items = describe(view.format, view.itemsize)
        except BufferError as exc:
            if any(text in str(exc) for text in _EXTENSION_PROBLEMS):
                report.add("violation", "extended request", str(exc))
                return None
            refused = refused or f"{name} refused: {exc}"
            continue
        except (ValueError, TypeError) as exc:
            if not _refusal(exc):
                report.add("violation", "extended request",
                           f"{name}: {_raised(exc)}")
                return None
            refused = refused or (f"{name} refused with {type(exc).__name__} "
                                  f"(BufferError is the standard): {exc}")
            continue
        except Exception as exc:    # the exporter's fault: a report, not a crash
            report.add("violation", "extended request",
                       f"{name}: {_raised(exc)}")
            return None
        break
    else:
        report.add("info", "extended request",
                   f"{refused} (and each narrower request with DEVICE)")
        return None
    if refused:
        report.add("info", "extended request", f"{refused}; {name} answered")
    if device is not None:
        report.add("ok", "extended request", f"memory on device {device!r}")
    elif answered:
        report.add("ok", "extended request",
                   "CPU memory, answered explicitly (flags has DEVICE)")
    elif _declares_device(report) and report.protocols["typed_entry"]:
        # a typed entry that does not say where its memory is: CPU memory
        # all the same
        report.add("warning", "extended request",
                   "its type declares DEVICE, but its typed entry answered "
                   "FULL_RO|DEVICE as a legacy exporter (flags without "
                   "DEVICE): a consumer cannot tell the answer from one that "
                   "ignored the flag; answer it (BufferExt_SetDevice with "
                   "device NULL) or declare without DEVICE")
    else:
        report.add("info", "extended request",
                   "CPU memory; PyBUF_DEVICE ignored (a legacy exporter)")
    report.add("info", "element type", items)
    return device


def _declares_device(report: Report) -> bool:
    declared = report.protocols["declared_supported_flags"]
    return isinstance(declared, int) and declared > 0 and bool(declared & F.DEVICE)


def _undeclared_device(obj: Any, report: Report) -> Optional[str]:
    """The device of an exporter that does not declare DEVICE: no consumer
    passes it PyBUF_DEVICE (the header and a CPython that implements the
    draft pass an extended flag only to a type that declares it), so its
    device memory is refused to everyone; its getbuffer, asked directly,
    tells.  None for CPU memory or a type that declares DEVICE."""
    if _declares_device(report):
        return None
    try:
        device: Optional[str] = _bufferext._device_of(obj)
    except Exception:        # refused outright: nothing to learn here
        return None
    if device is not None:
        report.add("info", "extended request",
                   f"asked directly with FULL_RO|DEVICE, its getbuffer "
                   f"exports memory on device {device!r}; no consumer passes "
                   f"it PyBUF_DEVICE, which its type does not declare")
    return device


def _device_safety(obj: Any, device: Optional[str], report: Report) -> None:
    dl = report.protocols.get("dlpack_device")
    on_device = device is not None or (dl is not None and dl[0] not in
                                       (1, 3, 13))
    if not on_device:
        return
    leaks = []
    for request in legacy_requests():
        outcome, detail = _probe(obj, request)
        if outcome == "ok":
            detail.release()
            leaks.append(request)
        elif outcome == "violation":
            report.add("violation", flag_names(request), detail)
    if leaks:
        report.add("violation", "device safety",
                   "device memory handed to plain requests: " +
                   ", ".join(flag_names(r) for r in leaks[:6]) +
                   (" ..." if len(leaks) > 6 else ""))
    else:
        report.add("ok", "device safety",
                   f"all {len(legacy_requests())} plain requests refused")


# ---- claims vs behaviour -----------------------------------------------------

def _violations_of(request: int, raw: Dict[str, Any]) -> List[str]:
    # What get_buffer's gate refuses never gets here (_probe reports that
    # refusal as a violation): a read-only answer to WRITABLE, no shape for
    # ND, suboffsets without INDIRECT, a layout in another order than the
    # request asked for (C without STRIDES, or a *_CONTIGUOUS request's).
    # NULL strides read as C order.
    problems = []
    if request & F.FORMAT and raw["format"] is None:
        problems.append("FORMAT answered without a format")
    if request & F.STRIDES == F.STRIDES and raw["ndim"] > 0 and \
            raw["strides"] is None:
        problems.append("STRIDES answered without strides")
    return problems


def _claims(obj: Any, device: Optional[str], report: Report) -> None:
    try:
        mask = int(_bufferext.supported_flags(obj))
    except TypeError as exc:
        report.add("violation", "supported flags", str(exc))
        return
    undeclared = [b.name for b in _REQUIRED_BITS if b & F.REQUIRED & ~mask]
    report.add("info", "supported flags",
               f"effective mask {mask_text(mask)}" + (
                   f"; not declared: {', '.join(map(str, undeclared))}"
                   if undeclared else ""))
    extra = int(F.DEVICE) if device is not None else 0
    if device is None:
        # plain requests too: an exporter must not write the extension then
        for request in legacy_requests():
            outcome, detail = _probe(obj, request)
            if outcome == "violation":
                report.add("violation", flag_names(request), detail)
            elif outcome == "ok":
                detail.release()
    honoured = refused = 0
    for request in legacy_requests():
        if request & F.REQUIRED & ~mask:
            continue            # refused up front: nothing to verify
        outcome, view = _probe(obj, request | extra)
        if outcome == "violation":
            report.add("violation", flag_names(request), view)
            continue
        if outcome == "refused":
            if not isinstance(view, BufferError):
                report.add("info", flag_names(request),
                           f"refused with {type(view).__name__} (BufferError "
                           f"is the standard): {view}")
            refused += 1
            continue
        with view:
            problems = _violations_of(request, view._raw())
        for problem in problems:
            report.add("violation", flag_names(request), problem)
        honoured += 1
    report.add("ok" if report.conformant else "info", "requests",
               f"{honoured} declared requests answered, {refused} refused")


def _hint_as_buffer(report: Report) -> None:
    spoken = [f"{what} ({name})" for name, what in BRIDGED
              if report.protocols.get(name.strip("_")) not in (None, False)]
    if spoken:
        report.add("info", "as_buffer",
                   f"it speaks {spoken[0]}: bufferext.as_buffer(obj) "
                   "bridges it into an extended buffer (check "
                   "'bufferext.as_buffer(...)' instead)")


def _declaration(cls: type) -> Any:
    """The declaration as the header reads it: where the interpreter
    implements the draft, its slot; in backport mode
    ``__buffer_supported_flags__`` of the first class of the MRO that has
    it (no metaclass, no descriptor), 0 where none does."""
    native = _bufferext._native_declaration(cls)
    if native is not None:
        return native
    return next((klass.__dict__["__buffer_supported_flags__"] for klass in cls.__mro__
                 if "__buffer_supported_flags__" in klass.__dict__), 0)


def check_class(cls: type, target: str = "") -> Report:
    """A class's report, without making an instance (nothing is called):
    its instances export buffers (it has a buffer slot), and its
    ``__buffer_supported_flags__`` is a valid declaration.  How its
    instances answer needs one: ``--call``, or a target that makes it."""
    report = Report(target or cls.__qualname__, "class " + cls.__qualname__,
                    scope="class")
    exports = _bufferext._exports_buffers(cls)
    _class_protocols(cls, exports, report)
    if not exports:
        report.add("violation", "buffer",
                   f"its instances are not buffer exporters (the class "
                   f"{cls.__qualname__} has no buffer slot)")
        _hint_as_buffer(report)
        return report
    declared = _declaration(cls)
    if isinstance(declared, bool) or not isinstance(declared, int) or \
            not -1 <= declared <= 2**31 - 1:
        report.add("violation", "supported flags",
                   f"{cls.__qualname__}.__buffer_supported_flags__ = {declared!r} "
                   "is invalid: expected an int, -1 or a flag mask >= 0")
    else:
        mask = int(F.SIMPLE if declared == -1 else F.LEGACY if declared == 0
                   else declared)
        if not report.protocols["typed_entry"]:
            mask &= ~_bufferext.EXTENDED_FLAGS  # only an entry serves them
        report.add("ok", "supported flags", f"declared {declared_text(declared)}: "
                   f"effective mask {mask_text(mask)}")
    report.add("info", "target",
               f"{cls.__qualname__} is a class: its declaration is checked; how "
               "its instances answer needs one (--call checks what calling "
               "it makes, or give an expression that makes one)")
    return report


def check(obj: Any, target: str = "") -> Report:
    """Check ``obj`` and return the report (a class that is no buffer
    exporter itself: :func:`check_class`).

    Never raises for the object's faults: an exporter that fails a request
    with another exception than a refusal (BufferError; ValueError and
    TypeError are noted as non-standard refusals) is a violation naming
    the exception's type and message.
    """
    if isinstance(obj, type) and not _bufferext.check_buffer_supports(obj):
        return check_class(obj, target)
    report = Report(target or repr(obj)[:80], type(obj).__qualname__)
    _protocols(obj, report)
    if not report.protocols["buffer"]:
        report.add("violation", "buffer",
                   f"not a buffer exporter (a {type(obj).__name__!r} has no "
                   "buffer slot)")
        _hint_as_buffer(report)
        return report
    if _declares_device(report) and not report.protocols["typed_entry"]:
        report.add("warning", "typed entry",
                   "its type declares DEVICE but publishes no typed entry "
                   "(BufferExt_SetExtendedGetBuffer), which alone serves an "
                   "extended request: PyBUF_DEVICE never reaches it, and "
                   "check_buffer_supports(obj, DEVICE) is False")
    device = _where(obj, report)
    if device is None and not report.conformant:
        return report          # the extension was written wrongly: said
    if device is None:
        device = _undeclared_device(obj, report)
    _device_safety(obj, device, report)
    _claims(obj, device, report)
    declared = report.protocols["declared_supported_flags"]
    if device is not None and (not isinstance(declared, int) or
                               declared < 0 or not declared & F.DEVICE):
        report.add("violation", "supported flags",
                   f"exports device memory but does not declare DEVICE "
                   f"(declared {declared_text(declared)})")
    return report


def format_report(report: Report) -> str:
    """The human-readable report."""
    lines = [f"{report.target}: {report.type_name}", "protocols:"]
    for name, value in report.protocols.items():
        if name == "declared_supported_flags" and value is not None:
            value = declared_text(value)
        lines.append(f"  {name}: {value}")
    lines.append("findings:")
    for f in report.findings:
        lines.append(f"  [{f.level}] {f.subject}: {f.message}")
    lines.append("result: " + ("conformant" if report.conformant
                               else "NOT conformant")
                 + (" (the class's declaration; no instance was checked)"
                    if report.scope == "class" else ""))
    return "\n".join(lines) + "\n"
