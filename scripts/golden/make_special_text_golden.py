"""Golden ids for message text that holds special-token strings (issue 22, docs/parity.md).

Reads the adversarial records of operators/src/test/resources/tokenize/special-token-text.jsonl
(messages format, text and image parts) and writes, per record and model preset, the ids Stoker
must produce to special-token-text.golden.jsonl beside it. ``SpecialTokenTextTest`` compares them.

The text ids come from the real Hugging Face tokenizer (``tokenizers`` 0.23.3, pinned in
python/requirements-dev.txt; ``Tokenizer.from_file`` on ../shared/data/tokenizers/qwen3) with
``encode_special_tokens = True``, which is transformers' ``split_special_tokens=True``: special
tokens in the text are not matched. The template structure is the Qwen-VL chat template for these
conversations (``scripts/golden/make_golden.py`` checks it against transformers): an optional
default system turn, then ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, each image
part ``<|vision_start|>`` + N x ``<|image_pad|>`` + ``<|vision_end|>`` in place. Only that structure
contributes special ids; every text piece between them (``{role}\\n`` + text up to the next image
or the end of the message, the text after an image, the ``\\n`` after ``<|im_end|>``) is encoded on
its own, as Hugging Face's tokenizer does with the pieces between special tokens. Each image gets
``IMAGE_PADS`` pads (a 1x4x6 grid with merge size 2, what the test feeds). Labels: assistant turns
are trained except their first 3 tokens (``<|im_start|>assistant\\n``), everything else is -100
(QwenLM qwen-vl-finetune).

For the record it also tokenizes the rendered string the usual way (special tokens matched, what
the Hugging Face processor does), checks that both give the same ids for the records whose text
holds no special-token string, and stores, and prints, how many ``<|im_start|>``,
``<|im_end|>``, ``<|endoftext|>``, ``<|vision_start|>`` and ``<|image_pad|>`` ids each way gives.

Run with the dev venv: ``.venv/bin/python scripts/golden/make_special_text_golden.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO.parent / "shared" / "data" / "tokenizers" / "qwen3" / "tokenizer.json"
RESOURCES = REPO / "operators" / "src" / "test" / "resources" / "tokenize"
RECORDS = RESOURCES / "special-token-text.jsonl"
GOLDEN = RESOURCES / "special-token-text.golden.jsonl"

IMAGE_PADS = 6
DEFAULT_SYSTEM = "You are a helpful assistant."
PRESETS = {"qwen2-vl": DEFAULT_SYSTEM, "qwen2.5-vl": DEFAULT_SYSTEM, "qwen3-vl": None}
HEADER_TOKENS = 3
IGNORE = -100

IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
}
SPECIAL = [
    t.content
    for t in Tokenizer.from_file(str(TOKENIZER)).get_added_tokens_decoder().values()
    if t.special
]
COUNTED = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|image_pad|>"]


def turns(messages: list[dict], default_system: str | None) -> list[tuple[str, list]]:
    """(role, parts) per turn, the default system turn inserted; parts are str or None (image)."""
    out: list[tuple[str, list]] = []
    if default_system is not None and (not messages or messages[0]["role"] != "system"):
        out.append(("system", [default_system]))
    for m in messages:
        parts = [p["text"] if p["type"] == "text" else None for p in m["content"]]
        out.append((m["role"], parts))
    return out


def encode_structured(text_tok: Tokenizer, rendered: list[tuple[str, list]]) -> tuple[list, list]:
    ids: list[int] = []
    labels: list[int] = []

    def text(s: str, into: list[int]) -> None:
        if s:
            into.extend(text_tok.encode(s, add_special_tokens=False).ids)

    for role, parts in rendered:
        turn = [IDS["<|im_start|>"]]
        buffer = role + "\n"
        for part in parts:
            if part is None:
                text(buffer, turn)
                buffer = ""
                turn += [IDS["<|vision_start|>"]] + [IDS["<|image_pad|>"]] * IMAGE_PADS
                turn.append(IDS["<|vision_end|>"])
            else:
                buffer += part
        text(buffer, turn)
        turn.append(IDS["<|im_end|>"])
        text("\n", turn)
        ids += turn
        if role == "assistant":
            labels += [IGNORE] * HEADER_TOKENS + turn[HEADER_TOKENS:]
        else:
            labels += [IGNORE] * len(turn)
    return ids, labels


def render_string(rendered: list[tuple[str, list]]) -> str:
    block = "<|vision_start|>" + "<|image_pad|>" * IMAGE_PADS + "<|vision_end|>"
    return "".join(
        "<|im_start|>"
        + role
        + "\n"
        + "".join(block if p is None else p for p in parts)
        + "<|im_end|>\n"
        for role, parts in rendered
    )


def counts(ids: list[int]) -> dict[str, int]:
    return {token: ids.count(IDS[token]) for token in COUNTED}


def main() -> None:
    text_tok = Tokenizer.from_file(str(TOKENIZER))
    text_tok.encode_special_tokens = True
    plain = Tokenizer.from_file(str(TOKENIZER))
    for token, token_id in IDS.items():
        assert plain.token_to_id(token) == token_id, token
    rows = []
    print(f"{'record':32} {'preset':10} " + " ".join(f"{t:>16}" for t in COUNTED))
    for line in RECORDS.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        for preset, default_system in PRESETS.items():
            rendered = turns(record["messages"], default_system)
            ids, labels = encode_structured(text_tok, rendered)
            before = plain.encode(render_string(rendered), add_special_tokens=False).ids
            if not any(token in line for token in SPECIAL):
                # ordinary text: the structured encoding is the processor's, id for id
                assert ids == before, record["id"]
            rows.append(
                {
                    "id": record["id"],
                    "preset": preset,
                    "input_ids": ids,
                    "labels": labels,
                    "counts": counts(ids),
                    "rendered_then_tokenized_counts": counts(before),
                }
            )
            b, a = counts(before), counts(ids)
            print(
                f"{record['id']:32} {preset:10} "
                + " ".join(f"{str(b[t]) + ' -> ' + str(a[t]):>16}" for t in COUNTED)
            )
    with GOLDEN.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    print(f"wrote {len(rows)} rows to {GOLDEN.relative_to(REPO)}")


if __name__ == "__main__":
    main()
