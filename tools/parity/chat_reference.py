#!/usr/bin/env python3
"""Chat-template reference renderings for vkformers-chat.

Renders several conversations through transformers' own chat-template machinery
(`transformers.utils.chat_template_utils.render_jinja_template`, the function
`apply_chat_template` calls) and writes tests/fixtures_chat/cases.json. Offline; no model or
tokenizer is downloaded. The templates below are written for these tests to behave like the
chat templates of well-known model families; they are not copies of them.

Usage: chat_reference.py [--out DIR]    (default DIR: tests/fixtures_chat)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_fixtures import check_versions  # noqa: E402

DEFAULT_OUT = HERE.parent.parent / "tests" / "fixtures_chat"

# Llama-3 style: bos, header tokens, an optional system block with a date, trimmed contents.
LLAMA3 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "1 Jan 2025" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# ChatML / Qwen style: a default system turn, tools listed as JSON, <|im_start|> turns.
CHATML = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- else %}
        {{- 'You are a helpful assistant.\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call these functions:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role != 'system' %}
    {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
        {%- if not tools %}
            {{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Gemma style: bos, role `model` for the assistant, no system role, strict alternation.
GEMMA = """{{ bos_token }}
{% if messages[0]['role'] == 'system' %}
{{ raise_exception('The system role is not supported by this template') }}
{% endif %}
{% for message in messages %}
{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
{{ raise_exception('Turns must alternate between user and assistant, starting with user') }}
{% endif %}
{% if message['role'] == 'assistant' %}
{% set role = 'model' %}
{% else %}
{% set role = message['role'] %}
{% endif %}
{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}
{% endfor %}
{% if add_generation_prompt %}
{{ '<start_of_turn>model\\n' }}
{% endif %}
"""

# Mistral-like [INST] template exercising loop variables, loop controls, namespace,
# Python string methods, join, length, tojson with options, eos_token and indentation handling.
LOOPS = """{%- set ns = namespace(system='', turns=0) %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- set ns.system = message.content.strip() %}
        {%- continue %}
    {%- endif %}
    {%- set ns.turns = ns.turns + 1 %}
{%- endfor %}
{{- bos_token }}
    {% if ns.system %}
<<SYS>>{{ ns.system.upper() }}<</SYS>>
    {% endif %}
{% for message in messages if message.role != 'system' %}
    {% if message.content.startswith('STOP') %}
        {% break %}
    {% endif %}
    {% if message.role == 'user' %}
[INST] {{ message.content | trim }} [/INST]
    {%- elif message.role == 'assistant' %}
 {{ message.content.strip() }}{{ eos_token }}
    {% endif %}
    {% if loop.last %}
(turn {{ loop.index }} of {{ loop.length }}; {{ ns.turns }} counted)
    {% endif %}
{% endfor %}
{% if meta is defined %}
{{ meta | tojson(indent=2, sort_keys=true) }}
{{ meta.tags | join(', ') }} / {{ meta.tags | length }} / {{ 'a-b-c'.split('-') | join('+') }} / {{ '  pad  '.rstrip() }}|
{% endif %}
{% if add_generation_prompt %}
{{- '[ASSISTANT]' -}}
{% endif %}
"""

TEMPLATES = {"llama3": LLAMA3, "chatml": CHATML, "gemma": GEMMA, "loops": LOOPS}
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

SYSTEM = {"role": "system", "content": "  You are terse.\n"}
U1 = {"role": "user", "content": "Hello there!  "}
A1 = {"role": "assistant", "content": " Hi. How can I help?\n"}
U2 = {"role": "user", "content": "Write \"quotes\", 'ticks', <tags> & ünïcødé — 日本語.\n\nTwo lines."}
A2 = {"role": "assistant", "content": "Done:\n\t- item\n"}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city — “quoted”, <b>bold</b> & more",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "noop", "parameters": {}, "enabled": True, "weight": 0.5, "x": None}},
]
META = {"tags": ["alpha", "beta", "γ"], "nested": {"b": [1, 2.5, False, None], "a": "x\"y"}, "count": 3}

CONVERSATIONS = {
    "single_user": [U1],
    "system_user": [SYSTEM, U1],
    "multi_turn": [U1, A1, U2],
    "system_multi_turn": [SYSTEM, U1, A1, U2, A2],
    "ends_with_assistant": [U1, A1],
}


def cases():
    """Every (template, conversation, add_generation_prompt, extra) combination to render."""
    out = []
    for tname in TEMPLATES:
        for cname, conv in CONVERSATIONS.items():
            for agp in (False, True):
                out.append((tname, cname, conv, agp, {}))
    out.append(("llama3", "date_extra", [SYSTEM, U1], True, {"date_string": "29 Feb 2028"}))
    out.append(("chatml", "tools", [U1], True, {"tools": TOOLS}))
    out.append(("chatml", "tools_system", [SYSTEM, U1, A1], False, {"tools": TOOLS}))
    out.append(("loops", "meta", [SYSTEM, U1, A1], True, {"meta": META}))
    stop = {"role": "user", "content": "STOP here"}
    out.append(("loops", "break", [U1, A1, stop, A2], False, {}))
    out.append(("gemma", "not_alternating", [U1, U2], True, {}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    versions = check_versions()
    import jinja2
    import transformers
    from transformers.utils.chat_template_utils import render_jinja_template

    versions["jinja2"] = jinja2.__version__
    versions["transformers"] = transformers.__version__
    results = []
    for tname, cname, conv, agp, extra in cases():
        case = {
            "name": f"{tname}/{cname}/{'gen' if agp else 'nogen'}",
            "template": tname,
            "messages": conv,
            "add_generation_prompt": agp,
            "extra": extra,
        }
        try:
            # What apply_chat_template does: special tokens first, caller's kwargs over them.
            rendered, _ = render_jinja_template(
                conversations=[conv], chat_template=TEMPLATES[tname], add_generation_prompt=agp, **{**SPECIAL, **extra}
            )
            case["expected"] = rendered[0]
        except jinja2.exceptions.TemplateError as e:
            case["error"] = str(e)
        results.append(case)
    doc = {
        "generator": "tools/parity/chat_reference.py",
        "versions": versions,
        "special_tokens": SPECIAL,
        "templates": TEMPLATES,
        "cases": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "cases.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(results)} cases to {path}")


if __name__ == "__main__":
    main()
