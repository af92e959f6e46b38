"""Fencing: every write of a stream's data checks the writer's token first.

**Fencing.** Every write of a stream's data (journal, state, definitions, the windows' blocks,
checkpoints and deletions) is one Lua script that first compares the fence with the writer's
token and refuses the whole write (``FENCED``) when they differ; the keys all share the stream's
hash tag, so the script runs in one slot on Redis Cluster too. A paused or partitioned old owner
can therefore never write after a newer owner took the stream: it learns so from the refusal
(:class:`FencedError`) or from its lease, and drops the stream. Large writes of several fences
(a keyed stream's flush of its key groups) check them the optimistic way instead
(:func:`fenced_together`: ``WATCH``, the tokens read, ``MULTI``/``EXEC``): the same check,
without copying every argument into Lua and back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .connect import pipeline_on_key_node
from .lua import registered
from .protocol import StoreError
from .resp import Packed, PackedPipeline, arg_count

__all__ = ["Fence", "FencedError", "Op", "check_reply", "fenced", "fenced_together", "is_fenced"]


class FencedError(StoreError):
    """A write was refused: a newer owner holds the stream (nothing of it was applied)."""


# KEYS[1] the fence, KEYS[2..] one key per operation; ARGV[1] the writer's token (0: no fence,
# KEYS[1] is then any key of the slot), then per operation: command, argument count, arguments.
# All or nothing: the check comes first, and a script runs alone.
_FENCED = """
if ARGV[1] ~= '0' then
  local f = redis.call('GET', KEYS[1])
  if f ~= ARGV[1] then
    return redis.error_reply('FENCED the stream belongs to token ' .. tostring(f) ..
      ', this writer holds ' .. ARGV[1])
  end
end
local a = 2
local r = 0
for k = 2, #KEYS do
  local n = tonumber(ARGV[a + 1])
  r = redis.call(ARGV[a], KEYS[k], unpack(ARGV, a + 2, a + 1 + n))
  a = a + 2 + n
end
return r
"""


def is_fenced(ex: BaseException) -> bool:
    return isinstance(ex, redis.ResponseError) and str(ex).startswith("FENCED")


@dataclass
class Fence:
    """A writer's fencing token for one stream (shared by its journal and its windows' stores).

    ``token`` 0 means "not fenced" (a store used on its own, outside the service): writes go
    through plainly. ``lost`` is set when a write was refused; the owner then drops the stream.
    """

    key: str
    token: int = 0
    lost: bool = False

    @property
    def active(self) -> bool:
        return self.token > 0


Op = tuple[str, str, Sequence[Any]]  # (command, key, arguments)


def fenced(client: Any, fence: Fence | None, ops: Sequence[Op], *, pipe: Any = None) -> Any:
    """Run ``ops`` (each ``(command, key, args)``, keys of one hash slot) as one atomic write:
    one script when ``fence`` is active, refused with :class:`FencedError` (nothing applied)
    when a newer owner holds the stream; else plain commands (in ``MULTI`` when several). With
    ``pipe``, queue it there (the caller executes and checks the reply with
    :func:`check_reply`). ``args`` may hold :class:`~.resp.Packed` arguments (then ``pipe``, if
    given, is a :class:`~.resp.PackedPipeline`). Returns the last command's reply (as Redis
    gave it, without redis-py's conversion, when unfenced ops with Packed arguments ran in
    a ``MULTI``)."""
    if not ops:
        return None
    if pipe is None and any(isinstance(a, Packed) for _, _, args in ops for a in args):
        p = pipeline_on_key_node(client, ops[0][1])
        fenced(client, fence, ops, pipe=p)
        replies = p.execute(raise_on_error=False)
        last = replies[-1]
        if (fence is None or not fence.active) and len(ops) > 1:  # MULTI ... EXEC
            replies = replies[:-1] + (last if isinstance(last, list) else [last])
            last = replies[-1]
        for r in replies:
            if isinstance(r, BaseException):
                raise check_reply(r, fence)
        return last
    if fence is None or not fence.active:  # unfenced: plain commands (MULTI for several)
        packed = any(isinstance(a, Packed) for _, _, args in ops for a in args)
        if pipe is not None and len(ops) > 1 and packed and isinstance(pipe, PackedPipeline):
            q: Any = pipe  # (its own MULTI: Packed arguments need it)
            q.execute_command("MULTI")
            for cmd, key, args in ops:
                q.execute_command(cmd, key, *args)
            q.execute_command("EXEC")
            return None
        p = pipe if pipe is not None else client.pipeline(transaction=len(ops) > 1)
        for cmd, key, args in ops:
            p.execute_command(cmd, key, *args)
        if pipe is not None:
            return None
        replies = p.execute()
        return replies[-1] if replies else None
    keys = [fence.key]
    argv: list[Any] = [fence.token]
    for cmd, key, args in ops:
        keys.append(key)
        argv.append(cmd)
        argv.append(arg_count(args))
        argv.extend(args)
    script = registered(client, _FENCED)
    try:
        return script(keys=keys, args=argv, client=pipe if pipe is not None else client)
    except redis.ResponseError as ex:
        raise check_reply(ex, fence) from ex


def fenced_together(pipe: PackedPipeline, writes: Sequence[tuple[Fence, Sequence[Op]]]) -> Any:
    """Several fenced writes (each ``(fence, ops)``, every key of one hash slot) as one
    optimistic transaction, without the script: ``WATCH`` the fences and read them; when
    each holds its writer's token, every write's commands in one ``MULTI``/``EXEC``, which
    Redis aborts if a fence changed after the ``WATCH`` (a newer holder's ``INCR``). The
    fence checked and the writes applied as one step, as :func:`fenced` checks and writes,
    at about half of Redis's CPU for large writes (a script copies every argument into Lua
    and back: ~3.6 us an ``HSET`` field of 260 bytes, against ~1.9 in a ``MULTI``).

    Per write, its last command's reply, or the first error among its commands' replies
    (the others applied, as in a script that failed midway); None when nothing was
    written: a fence did not hold its writer's token (moved on, or never set), or changed
    before the ``EXEC``. The caller then writes them one script each (:func:`fenced`),
    which tells which were refused."""
    want: dict[str, str] = {}
    for fence, _ in writes:
        if want.setdefault(fence.key, str(fence.token)) != str(fence.token) or not fence.active:
            return None  # (two tokens for one fence, or none: the script path says what)
    keys = list(want)

    def commands(values: list[Any]) -> list[tuple[Any, ...]] | None:
        for key, got in zip(keys, values, strict=True):
            if (got.decode() if isinstance(got, bytes) else got) != want[key]:
                return None
        return [(cmd, key, *args) for _, ops in writes for cmd, key, args in ops]

    replies = pipe.watched(keys, commands)
    if replies is None:
        return None
    out: list[Any] = []
    i = 0
    for _, ops in writes:
        part = replies[i : i + len(ops)]
        i += len(ops)
        err = next((r for r in part if isinstance(r, BaseException)), None)
        out.append(err if err is not None else part[-1])
    return out


def check_reply(ex: BaseException, fence: Fence | None) -> BaseException:
    """The error to raise for a failed fenced write: :class:`FencedError` (and the fence marked
    lost) for a refusal, else ``ex``."""
    if is_fenced(ex):
        if fence is not None:
            fence.lost = True
        return FencedError(str(ex))
    return ex
