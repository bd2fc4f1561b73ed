"""A file a command cannot read or write is one line naming the flag that gave it, exit 1;
real missing files and directories, the real `bidaw` entry point."""
from __future__ import annotations

import errno
from pathlib import Path

import pytest

from services.cli.main import _path_problem, build_parser, main

SAMPLE = str(Path(__file__).parent / "data" / "bidaw_sample.txt")  # a copy in the repo


def refusal(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert isinstance(err.value.code, str), err.value.code  # a message: exit status 1
    return err.value.code


def test_a_missing_or_wrong_file_names_its_flag(tmp_path):
    missing = tmp_path / "missing.txt"
    assert refusal(["simulate", "--trace", str(missing), "--format", "bidaw"]) == \
        f"bidaw simulate: --trace {missing}: No such file or directory"
    assert refusal(["simulate", f"--trace={tmp_path}", "--format", "bidaw"]) == \
        f"bidaw simulate: --trace {tmp_path}: Is a directory"
    assert refusal(["bench", "live", "--trace", str(missing)]) == \
        f"bidaw bench live: --trace {missing}: No such file or directory"


def test_an_output_under_a_file_names_its_flag(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert refusal(["trace", "synth", "--out", str(blocker / "t.txt")]) == \
        f"bidaw trace synth: --out {blocker / 't.txt'}: Not a directory"
    assert blocker.read_text() == "x"


def test_a_positional_path_and_a_message_only_error(tmp_path):
    missing = tmp_path / "missing.txt"
    assert refusal(["trace", "stats", str(missing)]) == \
        f"bidaw trace stats: {missing}: No such file or directory"
    assert refusal(["simulate", "--trace", SAMPLE, "--format", "bidaw", "--profile",
                    "nosuch"]).startswith("bidaw simulate: no profile 'nosuch'; known: ")


def test_other_os_errors_keep_their_traceback():
    args = build_parser().parse_args(["simulate", "--trace", SAMPLE])
    assert _path_problem(args, ConnectionRefusedError(errno.ECONNREFUSED, "refused"), []) is None


@pytest.mark.parametrize("flags, error", [
    (["--dram-gib", "-5"], "argument --dram-gib: must be > 0, got -5"),
    (["--dram-gib", "10,abc"], "argument --dram-gib: not a number: 'abc'"),
    (["--sample-users", "2"], "argument --sample-users: must be in (0, 1], got 2"),
    (["--kv-bytes-per-token", "0"], "argument --kv-bytes-per-token: must be a positive integer"),
    (["--watermark-gib", "1e400"], "argument --watermark-gib: not a finite number: '1e400'"),
    (["--time-scale", "-1"], "argument --time-scale: must be > 0, got -1"),
    (["--ssd-gbps", "1,nan"], "argument --ssd-gbps: not a finite number: 'nan'"),
])
def test_simulate_refuses_nonsense_numbers_by_flag(flags, error, capsys):
    with pytest.raises(SystemExit) as err:
        main(["simulate", "--cache-only", "--trace", SAMPLE, "--format", "bidaw", *flags])
    assert err.value.code == 2 and error in capsys.readouterr().err


def test_simulate_refuses_a_policy_arg_the_policy_does_not_take_before_any_run():
    assert refusal(["simulate", "--cache-only", "--trace", SAMPLE, "--policy-arg",
                    "bidaw.nosuch=1"]).startswith("bidaw simulate: --policy-arg bidaw.nosuch=1: ")
    assert refusal(["simulate", "--cache-only", "--trace", SAMPLE, "--dram-gib", "10,20",
                    "--watermark-gib", "15"]) == \
        "bidaw simulate: --watermark-gib 15 must be below --dram-gib (smallest 10)"


@pytest.mark.parametrize("argv, error", [
    (["load", "--sessions", "0"], "argument --sessions: must be a positive integer, got 0"),
    (["load", "--duration", "-5"], "argument --duration: must be > 0, got -5"),
    (["up", "--port", "70000"], "argument --port: must be a port in 0-65535, got 70000"),
    (["chat", "--temperature", "-1", "-m", "hi"], "argument --temperature: must be >= 0, got -1"),
    (["bench", "policies", "--sessions", "-1"], "argument --sessions: must be a positive integer"),
    (["bench", "live", "--repeat", "0"], "argument --repeat: must be a positive integer, got 0"),
    (["trace", "synth", "--users", "0", "--out", "x"], "argument --users: must be a positive"),
    (["chaos", "--fuzz-inputs", "-1"], "argument --fuzz-inputs: must be >= 0, got -1"),
])
def test_every_command_refuses_nonsense_counts_by_flag(argv, error, capsys):
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2 and error in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["chaos", "--faults", "nope,store-kill"], "bidaw chaos: --faults: unknown nope; known: "),
    (["simulate", "--systems", "nope"], "bidaw simulate: --systems: unknown system 'nope'"),
    (["load", "--target", "127.0.0.1:1"],
     "bidaw load: --target '127.0.0.1:1': expected the gateway's URL"),
    (["load", "--target", "http://127.0.0.1:1/v1"],  # it sent failed turns for 600 s
     "bidaw load: --target http://127.0.0.1:1/v1: [Errno 111] Connection refused"),
    (["load", "--think-s", "abc"], "bidaw load: --think-s 'abc': want LO:HI seconds"),
])
def test_a_bad_name_or_target_is_one_line(argv, message):
    assert refusal(argv).startswith(message)  # each was a traceback (or a hang) before


@pytest.mark.parametrize("argv, message", [
    (["trace", "synth", "--out", "-", "--rounds-mean", "1e308"],  # an OverflowError before
     "argument --rounds-mean: must be in (0, 10000], got 1e308"),
    (["bench", "store", "--sizes-mb", "x"], "argument --sizes-mb: not an integer: 'x'"),
])
def test_a_bad_number_is_a_usage_error_naming_the_flag(capsys, argv, message):
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2 and message in capsys.readouterr().err


def test_certs_refuses_a_host_or_a_validity_it_cannot_write(tmp_path, capsys):
    # a ValueError from the cryptography package, and an OverflowError, before
    with pytest.raises(SystemExit) as err:
        main(["certs", "--out", str(tmp_path / "a"), "--hosts", "ok.example,a b"])
    assert err.value.code == ("bidaw certs: --hosts: 'a b' is neither an IP address nor a DNS "
                              "name (letters, digits, '-' and '.'; IDNs in their xn-- form)")
    with pytest.raises(SystemExit) as err:
        main(["certs", "--out", str(tmp_path / "b"), "--days", "100000000"])
    assert err.value.code == 2
    assert "argument --days: at most 36500 days" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert main(["certs", "--out", str(tmp_path / "c"),
                 "--hosts", "*.kv-store.bidaw.svc,10.0.0.1,[::1],xn--bcher-kva.example"]) == 0


@pytest.mark.parametrize("argv, usage, named", [
    (["--bogus"], "usage: bidaw [-h] COMMAND", "unrecognized option --bogus"),
    (["up", "--bogus"], "usage: bidaw up ", "bidaw up: error: unrecognized arguments: --bogus"),
    (["bench", "live", "--trace", "t", "--bogus", "1"], "usage: bidaw bench live ",
     "bidaw bench live: error: unrecognized arguments: --bogus 1"),
])
def test_an_unknown_flag_is_named_with_the_usage_of_the_command_it_was_given_to(
        capsys, argv, usage, named):
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith(usage) and named in stderr, stderr
