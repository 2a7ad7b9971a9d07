"""The host's state read from /proc around a run (workers/host/host_load.py), on a /proc made
by hand, and once on this machine's own."""

import os

import pytest

from workers.host import host_load


def fake_proc(tmp_path, *, busy, total, own_ticks, pids=(), pressure_us=1000, load="0.50", parent=1):
    (tmp_path / "pressure").mkdir(exist_ok=True)
    idle = total - busy
    (tmp_path / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\n")
    (tmp_path / "pressure" / "memory").write_text(f"some avg10=0 avg60=0 avg300=0 total={pressure_us}\n")
    (tmp_path / "loadavg").write_text(f"{load} 0.40 0.30 1/100 1\n")
    for pid in pids:
        (tmp_path / str(pid)).mkdir(exist_ok=True)
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (x) S {parent} 1 1 0 -1 0 0 0 0 0 {own_ticks} 0 0 0 20 0 1 0")
    return tmp_path


def test_a_reading_sums_the_run_s_processes_and_skips_those_gone(tmp_path):
    proc = fake_proc(tmp_path, busy=300, total=1000, own_ticks=40, pids=(11, 12))
    reading = host_load.reading({11, 12, 13}, proc=proc)
    assert reading is not None
    assert (reading.busy, reading.total, reading.own) == (300, 1000, 80)
    assert (reading.memory_stall_us, reading.load) == (1000, 0.5)


def test_the_run_s_own_processes_are_the_worker_and_its_descendants(tmp_path):
    # The worker 100 started the vLLM server 200, whose engine is 300; 400 is someone else's.
    for pid, parent in ((100, 1), (200, 100), (300, 200), (400, 1), (500, 400)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            f"{pid} (vllm: engine (core)) S {parent} {pid} {pid} 0 -1 0 0 0 0 0 5 0"
        )
    assert host_load.own_pids(100, proc=tmp_path) == {100, 200, 300}
    assert host_load.own_pids(999, proc=tmp_path) == {999}


def test_a_watch_left_by_an_exception_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(host_load, "gpu_foreign", lambda own: None)
    proc = fake_proc(tmp_path, busy=300, total=1000, own_ticks=0, pids=(os.getpid(),))
    watch = host_load.HostWatch(proc=proc)
    with pytest.raises(RuntimeError), watch:
        raise RuntimeError("the load failed")
    assert watch.state is None


def test_without_proc_nothing_is_read(tmp_path):
    assert host_load.reading({1}, proc=tmp_path / "none") is None
    watch = host_load.HostWatch(proc=tmp_path / "none")
    with watch:
        pass
    assert watch.state is None


def test_a_watch_gives_the_run_s_host_state(tmp_path, monkeypatch):
    monkeypatch.setattr(host_load, "gpu_foreign", lambda own: None)
    proc = fake_proc(tmp_path, busy=300, total=1000, own_ticks=0, pids=(os.getpid(),))
    watch = host_load.HostWatch(proc=proc)
    with watch:
        fake_proc(tmp_path, busy=900, total=2000, own_ticks=200, pids=(os.getpid(),), load="2.5")
    assert watch.state is not None
    assert watch.state.foreign_cpu == pytest.approx((600 - 200) / 1000)
    assert watch.state.load == 2.5
    assert watch.state.flagged


def test_without_nvidia_smi_there_is_no_gpu_figure(monkeypatch):
    monkeypatch.setattr(host_load.shutil, "which", lambda name: None)
    assert host_load.gpu_foreign({1}) is None


def test_on_this_host_a_watch_reads_proc_where_there_is_one():
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc on this host")
    watch = host_load.HostWatch()
    with watch:
        sum(i * i for i in range(10000))
    assert watch.state is not None
    assert 0.0 <= watch.state.foreign_cpu <= 1.0
    assert watch.state.cores == os.cpu_count()
