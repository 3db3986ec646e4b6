"""EventTime: a task's watermarks and idleness (docs/event-time.md).

A task with inputs turns its channels' watermarks and idleness into its
input watermark (`WatermarkValve`) and passes it down the chain
(`Operator.on_watermark`: windows fire) and on to its outputs, up to an
operator that `generates_watermarks` (assign_timestamps_and_watermarks):
from there on the chain's watermarks are that operator's, asked after each
batch (`after_batch`) and when there is no input (`idle_check`). Between
batches, processing-time windows fire by the task's clock. The end of the
input is the final watermark (+inf), sent when event time flows through the
task. A window's late rows go to the chain's late-data side output
(`OperatorChain.emit_late`, wired when the chain is built).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import assert_never

from sluice.eventtime import MAX_WATERMARK, MIN_WATERMARK
from sluice.eventtime import watermarks as wm
from taskmanager.operator_chain import OperatorChain
from taskmanager.operators.base import Operator


def _no_input() -> bool:
    """A chain with inputs whose gate gave nothing has no input pending."""
    return False


class EventTime:
    def __init__(self, chain: OperatorChain, channels: int | None) -> None:
        """`channels`: the input gate's channels (None: a source chain)."""
        self.chain = chain
        self.valve = wm.WatermarkValve(channels) if channels is not None else None
        ops = [op for _op_id, op in chain.operators]
        # the operator that makes the chain's watermarks, and its place in the chain
        self.generator_index = next((i for i, op in enumerate(ops) if op.generates_watermarks), -1)
        self.generator: Operator | None = ops[self.generator_index] if self.generator_index >= 0 else None
        # watermarks flow through this task: send the final one at the end
        self.active = any(op.uses_event_time for op in ops)

    @property
    def watermark(self) -> int | None:
        """The task's current input watermark in ms (a source chain: the watermark it sends);
        None before the first one, or without event time."""
        if self.valve is not None and self.valve.watermark != MIN_WATERMARK:
            return self.valve.watermark
        if self.generator is not None:
            return self.generator.current_watermark
        return None

    # -- the input channels (the task thread) -----------------------------------------------------
    def on_watermark(self, channel: int, timestamp: int) -> None:
        assert self.valve is not None
        self.active = True
        self._on_valve(self.valve.on_watermark(channel, timestamp))

    def on_status(self, channel: int, idle: bool) -> None:
        assert self.valve is not None
        self._on_valve(self.valve.on_idle(channel) if idle else self.valve.on_active(channel))

    def on_end(self, channel: int) -> None:
        assert self.valve is not None
        self._on_valve(self.valve.on_end(channel))

    def _on_valve(self, actions: Sequence[wm.WatermarkAction]) -> None:
        """The input watermark or idleness changed: pass it down the chain (up to the operator
        that generates watermarks, which makes its own)."""
        end = self.generator_index if self.generator is not None else len(self.chain.operators)
        self._on_actions(actions, 0, end)

    def _on_actions(self, actions: Sequence[wm.WatermarkAction], start: int, end: int) -> None:
        for action in actions:
            match action:
                case wm.EmitWatermark(timestamp=timestamp):
                    self._advance(timestamp, start, end)
                case wm.EmitIdle() | wm.EmitActive():
                    if end == len(self.chain.operators):
                        for w in self.chain.writers:
                            w.stream_status(isinstance(action, wm.EmitIdle))
                case _:
                    assert_never(action)

    def _advance(self, timestamp: int, start: int, end: int) -> None:
        """Operators `start`..`end - 1` see the watermark (rows they fire go down the chain
        first); when it passes the whole chain, the outputs send it on."""
        operators = self.chain.operators
        for i in range(start, end):
            out = operators[i][1].on_watermark(timestamp)
            if out is not None:
                self.chain.process(out, start=i + 1)
        if end == len(operators):
            for w in self.chain.writers:
                w.watermark(timestamp)

    # -- between batches ----------------------------------------------------------------------------
    def after_batch(self) -> None:
        """A batch went through the chain: the generator may advance the watermark."""
        now = int(time.time() * 1000)
        self.chain.on_processing_time(now)
        if self.generator is None:
            return
        observed = [t for w in self.chain.writers if (t := w.take_max_timestamp()) is not None]
        actions = self.generator.after_batch(max(observed, default=None), now)
        self._on_actions(actions, self.generator_index + 1, len(self.chain.operators))

    def on_quiet(self) -> None:
        """No input now: processing-time windows may fire, a source without input says it is idle."""
        now = int(time.time() * 1000)
        self.chain.on_processing_time(now)
        if self.generator is not None:
            # a source with input still to read is never idle (docs/event-time.md, "Idleness");
            # a chain with inputs has none pending when its gate gave nothing
            source = self.chain.source
            actions = self.generator.idle_check(now, source.has_pending_input if source is not None else _no_input)
            self._on_actions(actions, self.generator_index + 1, len(self.chain.operators))

    def resend_watermark(self) -> None:
        """A restored generator sends the watermark it had reached, so downstream tasks, whose
        valves start from nothing, continue from it."""
        if self.generator is not None and (restored := self.generator.current_watermark) is not None:
            for w in self.chain.writers:
                w.watermark(restored)

    def end_input(self) -> None:
        """The end of the input is the final watermark: downstream tasks get it before the end
        of each output."""
        if self.active:
            for w in self.chain.writers:
                w.watermark(MAX_WATERMARK)
