"""Keys hidden in a server's log tail (rlrm/launch/fleet/process.py `_log_text`), and nothing else: the tail goes
into error lines a user reads and pastes."""

from __future__ import annotations

from rlrm.launch.fleet.process import ServerProcess


def _tail_of(tmp_path, text: str, **kwargs) -> str:
    server = ServerProcess(["sglang", "--port", "30000", "--api-key", "sk-argv-0123456789"], **kwargs)
    log = tmp_path / "server.log"
    log.write_text(text)

    class Log:
        name = str(log)

    server._log = Log()
    return server._log_text()


def test_keys_are_hidden_and_an_engines_token_counts_are_not(tmp_path):
    text = _tail_of(
        tmp_path,
        "server_args=ServerArgs(model_path='/m', api_key='sk-argv-0123456789', hf_token='hf_abcdefgh')\n"
        "env RLRM_API_KEY=env-key-98765, API_KEY: sk-other-55555\n"
        "Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00\n"
        "Decode batch. #running-req: 1, #token: 52, gen throughput (token/s): 9.8, max_tokens=5\n",
        env={"RLRM_API_KEY": "env-key-98765"},
    )
    for secret in ("sk-argv-0123456789", "hf_abcdefgh", "env-key-98765", "sk-other-55555"):
        assert secret not in text
    for count in ("#new-token: 6", "#cached-token: 0", "#token: 52", "max_tokens=5"):
        assert count in text, text


def test_keys_under_any_name_a_log_gives_them_are_hidden(tmp_path):
    text = _tail_of(
        tmp_path,
        "OPENAI_API_KEY=sk-env-1111 token=tok-2222 admin_api_key='adm-3333' --hf-token=hf_4444\n"
        '{"x-api-key": "xk-5555"} Authorization: Bearer sk-bearer-6666 password: pw-7777\n',
    )
    for secret in ("sk-env-1111", "tok-2222", "adm-3333", "hf_4444", "xk-5555", "sk-bearer-6666", "pw-7777"):
        assert secret not in text, text


def test_a_routers_colours_are_not_pasted_into_error_lines(tmp_path):
    # the SGLang router colours its log: "not healthy after 180 s; its log ends: \x1b[2m2026-... \x1b[31mERROR\x1b[0m"
    text = _tail_of(
        tmp_path, "\x1b[2m2026-11-30 06:38:24\x1b[0m \x1b[31mERROR\x1b[0m request failed with server error\n"
    )
    assert text == "2026-11-30 06:38:24 ERROR request failed with server error\n"
