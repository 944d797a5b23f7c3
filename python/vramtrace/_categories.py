"""What the GPU's blocks hold: parameters, buffers, gradients and optimizer
state, told by PyTorch itself and recorded as tags (trace format 1.2).

A tag says what the live block at an address holds for its whole life, from
its allocation (before the tag too) to its free; so a block may be tagged
late, when it is found. The walker finds blocks at each optimizer step (the
global step post hook, which runs inside the step's ``Optimizer.step#...``
``record_function`` range) and once more when recording stops:

- every registered module's parameters (their gradients too) and buffers:
  modules are collected as they register a parameter or a buffer (PyTorch's
  global registration hooks), and, for a start in the middle of a run, by
  one pass over the interpreter's objects; kept weakly, never alive;
- every stepping optimizer's parameters and their gradients, and the tensors
  of its state.

Only CUDA tensors are tagged, at the address of their storage (the block
PyTorch's allocator returned); a DTensor (FSDP2) is tagged by its local
shard. Activations and temporaries are not tagged: the analyzer tells them
from lifetimes.

Cost: a step's walk reads each stepping parameter's ``.grad`` and tags the
gradients that are new objects (a new gradient is a new object, even at the
address of the last one, and a new block): one attribute read and one
identity check per parameter, and a ``data_ptr()`` per new gradient.
Optimizer state is rescanned only when a state tensor died or the state
grew (state tensors are updated in place). The modules' parameters and
buffers, whose storage ``module.to()`` may swap under the same object (a
``data_ptr()`` each), are walked at the first step, every
``MODULE_WALK_EVERY`` steps, when a module registered a parameter or a
buffer, and when recording stops: a tag holds from its block's allocation,
so a late one is as exact, unless the block died in between (a model moved
twice within those steps), which then is inferred. All tags of a walk go to
the library in one call per device.
"""

from __future__ import annotations

import array
import ctypes
import gc
import threading
import warnings
import weakref
from collections.abc import Iterable
from typing import Any, Callable

PARAMETER, BUFFER, GRADIENT, OPTIMIZER_STATE = 0, 1, 2, 3

#: How a class's tensors reach their storage: the tensor itself, or the
#: local shard of a wrapper (DTensor's ``_local_tensor``, else ``to_local()``).
_PLAIN, _WRAPPER = 0, 1

#: A tensor whose storage could not be read (no tag, not read again).
_SKIP = object()

#: Steps between walks of the modules' parameters and buffers (see above).
MODULE_WALK_EVERY = 32


class _OptimizerState:
    """What the walks saw of one optimizer."""

    __slots__ = (
        "__weakref__",
        "container",
        "dirty",
        "entries",
        "groups",
        "orphans",
        "params",
        "signature",
        "watch",
    )

    def __init__(self) -> None:
        self.dirty = True
        self.container = 0  # id of optimizer.state at the last scan
        self.entries = -1  # len(optimizer.state) then
        self.signature: tuple | None = None  # the parameter lists and modules the orphans are of
        self.orphans: list = []  # parameters of no registered module
        self.groups: list[tuple[int, int]] | None = None  # the parameter lists `params` was made from: (id, len) each
        self.params: list = []  # weak references to the parameters read here, flattened
        self.watch: Any = None  # the watch of the others' gradients (see Walker)


# A parameter's or buffer's entry: what the last walk saw of it.
_REF, _PTR, _GRAD, _DEVICE, _WRAPPED = range(5)


class Walker:
    """Finds what blocks hold and emits tags for what changed since the
    last walk. ``emit(device, addrs, codes)`` receives one walk's tags of a
    device (``array('Q')`` and ``array('B')``); ``plain`` are the tensor
    classes whose storage is their own (``torch.Tensor``,
    ``torch.nn.Parameter``; the first is the class every tensor is an
    instance of); ``report`` is called with a message, once, when something
    could not be walked."""

    def __init__(self, emit: Callable, plain: Iterable[type] = (),
                 report: Callable[[str], None] | None = None,
                 watch: Callable[[list], object] | None = None) -> None:
        plain = list(plain)
        self._emit = emit
        # Makes a watch of plain parameters' gradients that tags the new
        # ones itself (`tag_new()`: how many it tagged, or -1): the shim's,
        # in C++; None: gradients are read here.
        self._watch = watch
        self._plain = frozenset(plain)
        self._report = report
        self._reported = False
        self._kinds = {cls: _PLAIN for cls in plain}
        self._tensor_types = tuple(plain) or (object,)
        self._lock = threading.Lock()
        self._modules: weakref.WeakSet = weakref.WeakSet()
        # id(module) -> weakref: whether a module is known, in one lookup.
        self._module_ids: dict = {}
        self._module_refs: list = []
        self._modules_changed = False
        # Bumped whenever a module registers a tensor: the optimizers'
        # parameters of no module are worked out again.
        self._generation = 0
        self._optimizers: weakref.WeakSet = weakref.WeakSet()
        self._states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # id(tensor) -> [weakref, data_ptr (None: not on a GPU; _SKIP: not
        # readable), weakref of the gradient last tagged, device, wrapped]:
        # parameters and buffers, whose storage may change under the object.
        self._seen: dict = {}
        # id(tensor) -> weakref of optimizer state tagged (its death makes
        # its optimizer's state dirty).
        self._state_seen: dict = {}
        self.walks = 0
        self.tags = 0

    # ------------------------------------------------------------ sources

    def add_module(self, module) -> None:
        """A module that holds (or will hold) parameters or buffers. Cheap
        for a module already known: FSDP2 registers its modules' parameters
        anew at every unshard and reshard, four times a step."""
        r = self._module_ids.get(id(module))
        if r is not None and r() is module:
            return
        self._module_ids[id(module)] = weakref.ref(module)
        self._generation += 1
        self._modules.add(module)
        self._modules_changed = True

    def add_modules(self, modules: Iterable) -> None:
        for m in modules:
            self.add_module(m)

    def scan_modules(self, module_type: type) -> int:
        """Finds the modules that exist now (a start in the middle of a
        run): one pass over the objects the garbage collector tracks."""
        # isinstance() on some objects (a deprecated torch alias, say) warns;
        # the scan is vramtrace's, so the program sees none of it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = [o for o in gc.get_objects() if isinstance(o, module_type)]
        self.add_modules(found)
        return len(found)

    # -------------------------------------------------------------- walks

    def step(self, optimizer) -> None:
        """After ``optimizer.step()``: the optimizer's gradients and state,
        and the modules when it is their turn (see the module docs)."""
        with self._lock:
            # An optimizer's first step walks the modules too: its
            # parameters of no module are found then.
            modules = (self._modules_changed or self.walks % MODULE_WALK_EVERY == 0
                       or optimizer not in self._states)
            self._optimizers.add(optimizer)
            self._walk([optimizer], modules)

    def final(self) -> None:
        """When recording stops: everything known, state rescanned."""
        with self._lock:
            optimizers = list(self._optimizers)
            for o in optimizers:
                st = self._states.get(o)
                if st is not None:
                    st.dirty = True
            self._walk(optimizers)

    def forget(self) -> None:
        """Forgets what was tagged (a new recording tags everything again,
        the modules at its first step); modules and optimizers stay known."""
        with self._lock:
            self._seen.clear()
            self._state_seen.clear()
            self._states = weakref.WeakKeyDictionary()
            self._modules_changed = True

    def _walk(self, optimizers: list, modules: bool = True) -> None:
        out: dict = {}
        if modules:
            try:
                self._walk_modules(out)
            except Exception as e:  # noqa: BLE001 - never break the program
                self.fail(e)
        for o in optimizers:
            try:
                self._walk_optimizer(o, out, modules)
            except Exception as e:  # noqa: BLE001
                self.fail(e)
        self.walks += 1
        for device, (addrs, codes) in out.items():
            self.tags += len(addrs)
            try:
                self._emit(device, addrs, codes)
            except Exception as e:  # noqa: BLE001
                self.fail(e)
        if self.walks % 64 == 0:
            self._prune()

    # ------------------------------------------------------------ helpers

    def fail(self, e: BaseException) -> None:
        """Reports a failure once (then stays quiet)."""
        if not self._reported:
            self._reported = True
            if self._report is not None:
                self._report(f"categories: {type(e).__name__}: {e} (what it would have "
                             "tagged is left to the analyzer's inference)")

    def _wrapped(self, t) -> bool:
        """Whether `t` wraps a local tensor that holds its memory (DTensor)."""
        cls = type(t)
        kind = self._kinds.get(cls)
        if kind is None:
            kind = _WRAPPER if hasattr(cls, "to_local") else _PLAIN
            self._kinds[cls] = kind
        return kind == _WRAPPER

    @staticmethod
    def _local(t):
        """A wrapper's local tensor (DTensor's ``_local_tensor``)."""
        local = getattr(t, "_local_tensor", None)
        return t.to_local() if local is None else local

    @staticmethod
    def _add(local, code: int, out: dict, device=None):
        """Tags `local`'s block; returns its data pointer (None when it is
        not on a GPU: nothing to tag)."""
        if device is None:
            if not local.is_cuda:
                return None
            device = local.get_device()
        ptr = local.data_ptr()
        off = local.storage_offset()
        # The storage's address: the block PyTorch's allocator returned.
        addr = ptr if off == 0 else ptr - off * local.element_size()
        if addr:
            slot = out.get(device)
            if slot is None:
                slot = out[device] = (array.array("Q"), array.array("B"))
            slot[0].append(addr)
            slot[1].append(code)
        return ptr

    def _tensor(self, t, code: int, out: dict, e: list | None) -> list:
        """The slow path of a parameter or buffer: first seen, moved, not on
        a GPU, or not readable. Returns its entry, tagged if it is on a GPU
        and was not (or moved). A moved parameter's gradient is tagged again."""
        key = id(t)
        if e is not None and e[_REF]() is not t:
            e = None
        try:
            wrapped = self._wrapped(t)
            local = self._local(t) if wrapped else t
            if e is not None:
                ptr = e[_PTR]
                if ptr is _SKIP:
                    return e
                if ptr is None:
                    if not local.is_cuda:
                        return e
                elif local.data_ptr() == ptr:
                    return e
            if not local.is_cuda:
                e = [weakref.ref(t), None, None, -1, wrapped]
            else:
                device = local.get_device()
                e = [weakref.ref(t), self._add(local, code, out, device), None, device, wrapped]
        except Exception as ex:  # noqa: BLE001 - a tensor without storage
            self.fail(ex)
            e = [weakref.ref(t), _SKIP, None, -1, False]
        self._seen[key] = e
        return e

    def _grad(self, p, e: list, out: dict) -> None:
        """A parameter's gradient, if it is a new object (a new block, even
        at the address of the last one) since the last tag."""
        g = p.grad
        if g is None:
            e[_GRAD] = None
            return
        r = e[_GRAD]
        if r is not None and r() is g:
            return
        if e[_PTR] is None or e[_PTR] is _SKIP:
            return  # the parameter is not on a GPU: neither is its gradient
        try:
            self._add(self._local(g) if e[_WRAPPED] else g, GRADIENT, out, e[_DEVICE])
            e[_GRAD] = weakref.ref(g)
        except Exception as ex:  # noqa: BLE001
            self.fail(ex)

    def _walk_modules(self, out: dict) -> None:
        if self._modules_changed:
            # (A module registered by another thread meanwhile makes this
            # raise: the walk goes on with the modules known so far.)
            refs = [weakref.ref(m) for m in list(self._modules)]
            self._modules_changed = False
            self._module_refs = refs
        get = self._seen.get
        slow, grad = self._tensor, self._grad
        for r in self._module_refs:
            m = r()
            if m is None:
                continue
            try:
                d = m.__dict__
                params = d.get("_parameters")
                if params:
                    for p in params.values():
                        if p is None:
                            continue
                        # The common case inline: a plain parameter seen
                        # before, where it was.
                        e = get(id(p))
                        if (e is not None and e[_REF]() is p and not e[_WRAPPED]
                                and e[_PTR] is not None and p.data_ptr() == e[_PTR]):
                            continue
                        # A moved parameter's new entry has no gradient:
                        # its gradient is tagged again.
                        grad(p, slow(p, PARAMETER, out, e), out)
                buffers = d.get("_buffers")
                if buffers:
                    for b in buffers.values():
                        if b is None:
                            continue
                        e = get(id(b))
                        if (e is not None and e[_REF]() is b and not e[_WRAPPED]
                                and e[_PTR] is not None and b.data_ptr() == e[_PTR]):
                            continue
                        slow(b, BUFFER, out, e)
            except Exception as e:  # noqa: BLE001 - one module, not the walk
                self.fail(e)

    def _orphans(self, opt, st: _OptimizerState) -> list:
        """The optimizer's parameters that no registered module holds (a
        bare tensor optimized), worked out again when its parameter lists
        or the modules change."""
        groups = opt.param_groups
        signature = (self._generation, len(self._module_refs),
                     tuple((id(g["params"]), len(g["params"])) for g in groups))
        if signature != st.signature:
            held: set[int] = set()
            for r in self._module_refs:
                m = r()
                params = m.__dict__.get("_parameters") if m is not None else None
                if params:
                    held.update(id(p) for p in params.values())
            st.orphans = [p for g in groups for p in g["params"] if id(p) not in held]
            st.signature = signature
        return st.orphans

    def _walk_optimizer(self, opt, out: dict, modules: bool) -> None:
        st = self._states.get(opt)
        if st is None:
            st = self._states[opt] = _OptimizerState()
        if modules:
            for p in self._orphans(opt, st):
                self._grad(p, self._tensor(p, PARAMETER, out, self._seen.get(id(p))), out)
        self._walk_gradients(opt, st, out)
        state = opt.state
        # State tensors are updated in place: rescanned only when one died
        # (replaced, or the state loaded anew) or the state grew.
        if not st.dirty and st.container == id(state) and st.entries == len(state):
            return
        st.dirty = False
        st.container = id(state)
        st.entries = len(state)
        seen = self._state_seen
        stref = weakref.ref(st)

        def died(_ref, stref=stref) -> None:
            s = stref()
            if s is not None:
                s.dirty = True

        tensors = self._tensor_types
        for values in list(state.values()):
            if not isinstance(values, dict):
                continue
            for v in list(values.values()):
                for t in (v if isinstance(v, (list, tuple)) else (v,)):
                    if not isinstance(t, tensors):
                        continue
                    r = seen.get(id(t))
                    if r is not None and r() is t:
                        continue
                    try:
                        self._add(self._local(t) if self._wrapped(t) else t,
                                  OPTIMIZER_STATE, out)
                    except Exception as ex:  # noqa: BLE001
                        self.fail(ex)
                    seen[id(t)] = weakref.ref(t, died)

    def _walk_gradients(self, opt, st: _OptimizerState, out: dict) -> None:
        """The gradients of the optimizer's parameters that are new objects
        since the last walk: the hot path of a step's walk. Plain
        parameters' gradients are the watch's, when there is one (one call);
        the others' (a DTensor's, or all without a watch) are read here (a
        parameter seen for the first time is tagged too)."""
        groups = opt.param_groups
        shape = [(id(g["params"]), len(g["params"])) for g in groups]
        if shape != st.groups:
            st.groups = shape
            params = [p for g in groups for p in g["params"]]
            watched = [p for p in params if type(p) in self._plain] if self._watch else []
            st.watch = None
            if watched and self._watch is not None:
                try:
                    st.watch = self._watch(watched)
                except Exception as ex:  # noqa: BLE001 - read them here instead
                    self.fail(ex)
            kept: set[int] = set(map(id, watched)) if st.watch is not None else set()
            st.params = [weakref.ref(p) for p in params if id(p) not in kept]
        if st.watch is not None:
            n = st.watch.tag_new()
            if n < 0:
                self.fail(RuntimeError("the gradient watch failed"))
            else:
                self.tags += n
        get, slow, grad = self._seen.get, self._tensor, self._grad
        for pr in st.params:
            p = pr()
            if p is None:
                continue
            e = get(id(p))
            if e is None or e[_REF]() is not p:
                grad(p, slow(p, PARAMETER, out, None), out)
                continue
            g = p.grad
            if g is None:
                e[_GRAD] = None
                continue
            r = e[_GRAD]
            if r is not None and r() is g:
                continue
            grad(p, e, out)

    def _prune(self) -> None:
        """Forgets the tensors and modules that died, once there are many
        to forget."""
        if len(self._module_ids) > 2 * len(self._modules) + 1024:
            for k in [k for k, r in self._module_ids.items() if r() is None]:
                del self._module_ids[k]
        if len(self._seen) > 1024:
            for k in [k for k, e in self._seen.items() if e[_REF]() is None]:
                del self._seen[k]
        if len(self._state_seen) > 1024:
            for k in [k for k, r in self._state_seen.items() if r() is None]:
                del self._state_seen[k]


# ---------------------------------------------------------------- PyTorch

_walker: Walker | None = None
_hooks = False
_install_lock = threading.Lock()


def walker() -> Walker | None:
    """The process's walker, once categories were turned on."""
    return _walker


class ShimWatch:
    """A watch of plain parameters' gradients in the observer shim (C++):
    each step, one call tags the new ones through the library, where reading
    them here cost a GPT-2 step 1% (docs/performance.md). The shim holds the
    parameters and the gradients last tagged weakly."""

    def __init__(self, shim, params: list) -> None:
        impls = (ctypes.c_uint64 * len(params))(*(p._cdata for p in params))
        self._shim = shim
        self._watch = shim.vramtrace_shim_watch_gradients(impls, len(params))
        if not self._watch:
            raise RuntimeError((shim.vramtrace_shim_error() or b"").decode("utf-8", "replace"))

    def tag_new(self) -> int:
        return self._shim.vramtrace_shim_tag_new_gradients(self._watch)

    def __del__(self) -> None:
        watch, self._watch = getattr(self, "_watch", None), None
        if watch:
            self._shim.vramtrace_shim_unwatch(watch)


def install(torch, lib, report: Callable[[str], None], scan: bool = True,
            shim=None) -> Walker:
    """Sets up the walker for PyTorch (once per process): the module
    registration hooks, and, with ``scan``, the modules that exist already.
    Tags go to ``lib.vramtrace_observe_tag``; with the observer ``shim``,
    the stepping parameters' gradients are watched there."""
    global _walker, _hooks
    with _install_lock:
        if _walker is None:
            fn = lib.vramtrace_observe_tag

            def emit(device, addrs, codes) -> None:
                n = len(addrs)
                if n:
                    fn(device, addrs.buffer_info()[0], codes.buffer_info()[0], n)

            plain = [torch.Tensor, torch.nn.Parameter]
            watch = (lambda params: ShimWatch(shim, params)) if shim is not None else None
            _walker = Walker(emit, plain, report, watch)
        w = _walker
        if not _hooks:
            _hooks = True
            try:
                from torch.nn.modules.module import (
                    register_module_buffer_registration_hook,
                    register_module_parameter_registration_hook,
                )
            except ImportError:
                report("this PyTorch has no module registration hooks: modules made "
                       "from now on are found through their optimizer only")
            else:
                def registered(module, name, tensor):
                    try:
                        w.add_module(module)
                    except Exception:  # noqa: BLE001 - never break the program
                        pass

                register_module_parameter_registration_hook(registered)
                register_module_buffer_registration_hook(registered)
        if scan:
            try:
                w.scan_modules(torch.nn.Module)
            except Exception as e:  # noqa: BLE001
                report(f"categories: the modules that exist could not be found ({e})")
        return w
