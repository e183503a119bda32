"""Device slots: no two running cells share a slot, across threads and processes (CPU only)."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fedcore.runtime_env.devices import DeviceSlots, needs_slot, pinned_device


def test_slots_spread_over_devices_then_block(tmp_path):
    slots = DeviceSlots(num_devices=2, per_device=2, lock_dir=tmp_path, poll_seconds=0.01)
    with slots.acquire() as a, slots.acquire() as b, slots.acquire() as c, slots.acquire() as d:
        assert [a, b, c, d] == [0, 1, 0, 1]
        with pytest.raises(TimeoutError), slots.acquire(timeout=0.05):
            pass
    with slots.acquire(timeout=0) as again:
        assert again == 0


def test_concurrent_threads_never_share_a_slot(tmp_path):
    slots = DeviceSlots(num_devices=3, lock_dir=tmp_path, poll_seconds=0.001)
    held: list[int] = []
    guard = threading.Lock()
    clashes: list[int] = []
    seen: set[int] = set()

    def cell() -> None:
        for _ in range(20):
            with slots.acquire() as device:
                with guard:
                    if device in held:
                        clashes.append(device)
                    held.append(device)
                    seen.add(device)
                threading.Event().wait(0.001)
                with guard:
                    held.remove(device)

    threads = [threading.Thread(target=cell) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clashes == []
    assert seen == {0, 1, 2}


@pytest.mark.slow
def test_slot_held_by_another_process_is_skipped_and_freed_when_it_dies(tmp_path):
    code = (
        "import sys, time\n"
        "from fedcore.runtime_env.devices import DeviceSlots\n"
        f"with DeviceSlots(2, lock_dir={str(tmp_path)!r}).acquire() as d:\n"
        "    print(d, flush=True)\n"
        "    time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parent.parent, env={**os.environ},
    )
    try:
        assert proc.stdout.readline().strip() == "0"
        slots = DeviceSlots(2, lock_dir=tmp_path, poll_seconds=0.01)
        with slots.acquire(timeout=0) as mine:
            assert mine == 1
            with pytest.raises(TimeoutError), slots.acquire(timeout=0.05):
                pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        with slots.acquire(timeout=5) as a, slots.acquire(timeout=5) as b:
            assert {a, b} == {0, 1}
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_pinned_device_only_for_open_gpu_choice(tmp_path):
    assert not needs_slot("auto", 0)
    assert not needs_slot("cpu", 4) and not needs_slot("cuda:1", 4)
    assert needs_slot("auto", 2) and needs_slot("cuda", 2)
    with pinned_device("auto", num_devices=0, lock_dir=tmp_path) as none:
        assert none is None
    with pinned_device("cuda:3", num_devices=4, lock_dir=tmp_path) as none:
        assert none is None
    with (
        pinned_device("auto", num_devices=2, lock_dir=tmp_path) as first,
        pinned_device("cuda", num_devices=2, lock_dir=tmp_path) as second,
    ):
        assert (first, second) == ("cuda:0", "cuda:1")
