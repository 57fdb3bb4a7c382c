"""The timed server's engine-like mode aborts a request whose client has gone, as vLLM does on a
disconnect: no chunk is written to a closed connection (asyncio logs every such write, thousands
at the stop of a 3000-stream run), a queued one is never admitted, and its handler is released."""

from __future__ import annotations

import asyncio

from rig.testing.step_engine import StepEngine, StepStream


def test_a_stream_whose_client_went_gets_no_more_chunks_and_is_released():
    async def scenario() -> tuple[list[int], list[int], list[int], bool, bool]:
        engine = StepEngine(step=0.001, max_num_seqs=2, ttft=0.001)  # the third waits for a free slot
        staying, leaving, queued = [], [], []
        leaving_stream = StepStream(lambda i, last: leaving.append(i), 50, gone=lambda: len(leaving) >= 3)
        staying_stream = StepStream(lambda i, last: staying.append(i), 5)
        queued_stream = StepStream(lambda i, last: queued.append(i), 5, gone=lambda: True)  # closed while it waited
        engine.submit(leaving_stream)
        engine.submit(staying_stream)
        engine.submit(queued_stream)
        await asyncio.wait_for(asyncio.gather(leaving_stream.done.wait(), staying_stream.done.wait(), queued_stream.done.wait()), 30)
        engine.task.cancel()
        return leaving, staying, queued, not engine.running, not engine.waiting

    leaving, staying, queued, none_running, none_waiting = asyncio.run(scenario())
    assert leaving == [0, 1, 2]  # its client went after the third chunk: nothing after it
    assert staying == [0, 1, 2, 3, 4]  # the others go on
    assert queued == [] and none_running and none_waiting
