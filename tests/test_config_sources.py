"""A service's settings from a `--config` YAML file, `BIDAW_*` env vars and flags: a file that is
not a YAML mapping, a value of the wrong type and a word that is not a boolean are refused in
one line saying where the value came from; real files, every service's real config class."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from scheduler.config import SchedulerConfig
from services.runtime.cluster_auth import write_token_file
from services.runtime.config import load_config

DEEP = "a: " + "[" * 10_000 + "]" * 10_000 + "\n"


@pytest.mark.parametrize("text, error", [
    (b"- a\n- b\n", "must be a mapping of setting names to values"),
    (b"just words\n", "must be a mapping"),
    (b"listen: [1, 2\n", "not YAML at line 2"),
    (b'listen: "\xff"\n', "not UTF-8 text (byte 10)"),
    (DEEP.encode(), "YAML nested too deep"),
    (b"max_queue: !!python/object/apply:os.system ['true']\n", "not YAML at line 1"),
    (b"max_queue: [1, 2]\n", "max_queue: not an integer: [1, 2]"),
    (b"ssd_aware: maybe\n", "ssd_aware: not a boolean: 'maybe'"),
    (b"heartbeat_s: .inf\n", "heartbeat_s: not a finite number"),
    (b"listen: {a: 1}\n", "listen: not a string"),
    (b"workers: [[1]]\n", "workers: not a list of values"),
    (b"nope: 1\n", "unknown keys ['nope']"),
])
def test_a_config_file_is_a_mapping_of_typed_values(tmp_path, text, error):
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    with pytest.raises(ValueError) as err:
        load_config(SchedulerConfig, argparse.Namespace(config=str(path)))
    assert str(err.value).startswith(f"{path}: ") and error in str(err.value), str(err.value)


def test_good_values_from_each_source_still_load(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text("max_queue: 7\nssd_aware: off\nworkers: [a:1, b:2]\n")
    monkeypatch.setenv("BIDAW_SCHEDULER_HEARTBEAT_S", "2.5")
    args = argparse.Namespace(config=str(path), cfg_restore_choice="yes")
    config = load_config(SchedulerConfig, args, env_prefix="BIDAW_SCHEDULER_")
    assert (config.max_queue, config.ssd_aware, config.workers) == (7, False, ["a:1", "b:2"])
    assert config.heartbeat_s == 2.5 and config.restore_choice is True


def test_a_bad_value_names_the_env_var_or_flag_that_gave_it(monkeypatch):
    monkeypatch.setenv("BIDAW_SCHEDULER_MAX_QUEUE", "abc")
    with pytest.raises(ValueError) as err:
        load_config(SchedulerConfig, None, env_prefix="BIDAW_SCHEDULER_")
    assert str(err.value).startswith("BIDAW_SCHEDULER_MAX_QUEUE: ")
    args = argparse.Namespace(config=None, cfg_ssd_aware="maybe")
    with pytest.raises(ValueError) as err:  # it was False: any unknown word switched it off
        load_config(SchedulerConfig, args)
    assert str(err.value) == ("--ssd-aware: not a boolean: 'maybe' "
                              "(true/false, yes/no, on/off, 1/0)")


def test_serve_refuses_a_bad_config_file_in_one_line(tmp_path):
    token = str(tmp_path / "token")
    write_token_file(token)
    (tmp_path / "c.yaml").write_text("max_queue: [1, 2]\n")
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve", "scheduler", "--listen",
         "127.0.0.1:0", "--config", str(tmp_path / "c.yaml"), "--cluster-token-file", token],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"bidaw serve scheduler: {tmp_path / 'c.yaml'}: max_queue: "
                                   "not an integer: [1, 2]")
