"""Cost of keeping the API key out of what the `openai` teacher stores, per response.

    .venv/bin/python benchmarks/bench_redact.py [--seconds 1.0]

Every 200 body is searched once for the key in all its encodings before it is parsed or
cached (`OpenAIBackend._scrub`); a body that carries it has every string redacted. Bodies are
a typical chat completion of about 2 KB (a tool call with reasoning, SQL and a result), as it
arrives: plain, with a few JSON escapes (\\u00e9, \\/), and echoing the key. Times are CPU time of
this thread per call (robust on a shared machine), with the 44-character key of the tests; the
reference is one compiled `re` alternation of the key's 8-character windows in every form,
which is what the redactor's block search replaces.
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from datagen.teachers.config import OpenAIConfig, SamplingConfig  # noqa: E402
from datagen.teachers.openai_client import OpenAIBackend  # noqa: E402

KEY = "sk-echo-7Qf3ZpL9xW2mKv8RtY4nB6cJ0hD5gS1aUe3w"
CONTENT = (
    "The orders table has the columns id, customer_id, total and created_at; the question asks "
    "for the customers whose orders in March 2024 add up to more than 1,000 EUR, so I group by "
    "customer and filter on the sum. Caf\u00e9 Lumi\u00e8re (C-1042) had 3 orders last month.\n"
    '<tool_call>\n{"name": "run_sql", "arguments": {"query": "SELECT customer_id, SUM(total) AS '
    "spent FROM orders WHERE created_at >= '2024-03-01' AND created_at < '2024-04-01' GROUP BY "
    'customer_id HAVING SUM(total) > 1000 ORDER BY spent DESC LIMIT 20"}}\n</tool_call>')


def bodies() -> dict[str, bytes]:
    """The response bodies timed, keyed by what they hold."""
    def body(content: str, ensure_ascii: bool = False) -> bytes:
        payload = {"id": "chatcmpl-9f2c4e1a7b3d4c2e8a1f6b0d5e7c9a3b", "object": "chat.completion",
                   "created": 1764758400, "model": "Qwen/Qwen2.5-32B-Instruct",
                   "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                "message": {"role": "assistant", "content": content,
                                            "tool_calls": []}}],
                   "usage": {"prompt_tokens": 1834, "completion_tokens": 212,
                             "total_tokens": 2046}}
        text = orjson.dumps(payload).decode()
        if ensure_ascii:  # how Python's json and many proxies write it: \\u00e9, \\/
            text = text.replace("\u00e9", "\\u00e9").replace("\u00e8", "\\u00e8")
            text = text.replace("/", "\\/")
        return text.encode()

    filler = " Checked against the schema: every argument has its declared type." * 17
    typical = CONTENT + filler
    return {"plain 2 KB": body(typical), "escaped 2 KB": body(typical, ensure_ascii=True),
            "key echoed (raw + base64)": body(
                f"{KEY} {base64.b64encode(KEY.encode()).decode()} " + typical)}


def per_call_us(call: Callable[[], object], seconds: float) -> float:
    calls, started = 0, time.thread_time()
    while time.thread_time() - started < seconds:
        for _ in range(50):
            call()
        calls += 50
    return (time.thread_time() - started) / calls * 1e6


def alternation(key: str) -> re.Pattern:
    """The reference: every 8-character window of every form in one alternation."""
    data = key.encode()
    forms = [key.lower(), data.hex(), "".join(f"\\u{ord(c):04x}" for c in key),
             "".join(f"%{b:02x}" for b in data)]
    forms += [base64.b64encode(data[a:]).decode() for a in range(3)]
    windows = {form[i:i + 8] for form in forms for i in range(len(form) - 7)}
    return re.compile("|".join(map(re.escape, sorted(windows))), re.I)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per figure")
    args = parser.parse_args()
    os.environ["BENCH_REDACT_KEY"] = KEY
    logging.getLogger("datagen.teachers.openai_client").setLevel(logging.ERROR)  # the echo warning
    backend = OpenAIBackend(OpenAIConfig(base_url="http://127.0.0.1:1/v1", model="m",
                                         api_key_env="BENCH_REDACT_KEY", cache=False),
                            SamplingConfig())
    reference = alternation(KEY)
    print(f"{'body':<28}{'bytes':>7}{'_scrub us':>12}{'re alternation us':>20}")
    for name, raw in bodies().items():
        response = orjson.loads(raw)
        scrub = per_call_us(lambda: backend._scrub(raw, response), args.seconds)
        text = raw.decode()
        regex = per_call_us(lambda: reference.search(text), args.seconds / 4)
        print(f"{name:<28}{len(raw):>7}{scrub:>12.1f}{regex:>20.1f}")


if __name__ == "__main__":
    main()
