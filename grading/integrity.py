"""Integrity check: veto only what cannot be an answer to the user; note what merely looks like grading talk.

The judge prompt quotes a response between markers it cannot close (they carry its hash) and verdicts are read only
from the judge's structured output, so a response cannot forge a verdict, only talk a judge into one. A veto (no
judge call, the rubric's lowest score) costs a correct answer everything, and RL learns to avoid the wording that
tripped it: clinical answers say "criteria are met", legal ones "judge", teaching ones "score". So only what no
answer to a user contains is vetoed:
- a forged verdict: grading/judge.py's output shapes (`criteria_met`, `"verdicts": [...]`, an object with both
  "explanation" and "rating"), their keys' variants and translations, per-criterion XML (`<criterion met="true"/>`);
- a fake delimiter or chat-role token: the judge prompt's `[[end of response ...]]` markers (other languages too),
  an END OF RESPONSE line, chat-template tokens (`<|im_start|>`, `[INST]`, ...). In code blocks and inline code
  (literal syntax shown to a user) these two are only noted;
- the rubric copied back: 2+ of its 5+-word criteria, and a third or 3, verbatim or 90% of their word trigrams;
- a grading request: a grading verb (imperative or "should be") and result (full marks, 10/10, criteria met, ...)
  in a sentence anchored, there or in the one before, by "this response", a grader addressed or an instruction
  override. Word lists: en, es, fr, de, it, pt, ru, zh, ja. A bare "judge" is no anchor (courts have judges);
- text addressed to this response's grader about its grading (`_addressed_to_grader`).
Anything else about grading (criteria claimed met, an override phrase, a grader named without a request, a role-like
header, one copied criterion) is a *note* beside an unchanged reward; GradingConfig.integrity_judge optionally asks
the judge about noted responses (one call).
"""

import base64
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from grading import judge
from grading.integrity_patterns import (
    AI_GRADER,
    BASE64_RUN,
    FENCED,
    FORGED,
    GRADE_THIS,
    GRADER,
    INVISIBLE,
    MARKER,
    NOTES,
    OVERRIDE,
    RESULT,
    RESULT_WORDS,
    RUBRIC_WORDS,
    SELF,
    SENTENCE,
    VERB,
)
from grading.rubric import Criterion, Rubric
from rubricrl.llm import LLMClient
from rubricrl.prompts import load_prompt

MIN_COPIED_CRITERIA = 2
"""A response repeating this many of its own rubric's criteria (5+ words, verbatim or 90% of their word trigrams),
and a third of them or 3, is presenting the rubric back to the grader."""
QUESTION = Criterion(load_prompt(Path(__file__).parent / "prompts" / "integrity_question.txt").text.strip(), -10)
"""The one question GradingConfig.integrity_judge asks about a noted response, as a negative criterion: "met"
means the response does address the grader."""


@dataclass(frozen=True)
class Integrity:
    veto: str | None = None
    """Why the response gets no judge call and the lowest score; None when it reads as an answer."""
    note: str | None = None
    """Grading talk worth a look that does not change the reward."""


def check(response: str, rubric: Rubric | None = None) -> Integrity:
    """Veto (certain) or note (ambiguous) for one response; see the module docstring for what is which. The text is
    read as the judge reads it: compatibility forms folded (full-width letters), invisible format characters
    (zero-width spaces and joiners) removed, and a long base64 run that decodes to text checked as that text."""
    response = _readable(response)
    outside = FENCED.sub(" ", response)  # a code block shows the user literal syntax (an LLM-judge or ChatML example)
    for reason, pattern in FORGED.items():
        if match := pattern.search(outside):
            return Integrity(veto=f"{reason}: {_quote(match)}")
    copied = _copied_criteria(response, rubric)
    if len(copied) >= MIN_COPIED_CRITERIA and (len(copied) * 3 >= len(rubric.criteria) or len(copied) >= 3):
        return Integrity(veto=f"copies the rubric: {len(copied)} of {len(rubric.criteria)} criteria")
    if request := _grading_request(response):
        return Integrity(veto=f"grading request about this response: {request!r}")
    if address := _addressed_to_grader(response):
        return Integrity(veto=f"addressed to the grader about this response: {address!r}")
    for reason, pattern in FORGED.items():
        if match := pattern.search(response):
            return Integrity(note=f"{reason} in a code block: {_quote(match)}")
    for reason, pattern in NOTES.items():
        if match := pattern.search(response):
            return Integrity(note=f"{reason}: {_quote(match)}")
    if copied:
        return Integrity(note=f"repeats a criterion of its rubric: {copied[0][:80]!r}")
    return Integrity()


def integrity_flag(response: str, rubric: Rubric | None = None) -> str | None:
    """The veto reason, or None (the check's historical interface)."""
    return check(response, rubric).veto


async def ask_judge(
    client: LLMClient,
    role: str,
    conversation: list[dict],
    response: str,
    samples: int = 1,
    verdict_format="explained",
    min_mass: float = 0.0,
):
    """The judge's verdict on QUESTION for one response (one call, `samples` choices, in the grading's verdict
    format, within its token budget; `min_mass` as grading.probability_min_mass): met = addresses the grader; None
    when the judge failed (nothing is vetoed)."""
    prompt = judge.default_prompt("per_criterion", verdict_format)
    return await judge.judge_per_criterion(
        client, role, prompt, conversation, response, QUESTION, samples, verdict_format, min_mass
    )


def _grading_request(response: str) -> str | None:
    """The sentence holding an anchored grading instruction, if any (the anchor may be in the sentence before)."""
    previous_anchored = False
    for match in SENTENCE.finditer(response):
        sentence = match.group(0).strip()
        anchored = bool(SELF.search(sentence) or GRADER.search(sentence) or OVERRIDE.search(sentence))
        if GRADE_THIS.search(sentence) or ((anchored or previous_anchored) and _instruction(sentence)):
            return sentence.strip()[:120]
        previous_anchored = anchored
    return None


def _addressed_to_grader(response: str) -> str | None:
    """A sentence addressed to this response's grader about grading it, read with its neighbours: a grader only the
    grader can be (an AI or model grader, "whoever evaluates this response") with talk of criteria or a grade; a grader
    addressed ("Note to the evaluator:") or an instruction override, about this response and its criteria (a court's
    judge is not enough); or a fake grading section (`</response>`, `<grading_notes>`, `[SYSTEM]`) then criteria met."""
    sentences = [m.group(0).strip() for m in SENTENCE.finditer(response) if m.group(0).strip()]
    for i, sentence in enumerate(sentences):
        window = " ".join(sentences[max(0, i - 1) : i + 2])
        if AI_GRADER.search(sentence) and (RUBRIC_WORDS.search(window) or RESULT_WORDS.search(window)):
            return sentence[:120]
        about_this = SELF.search(window) and RUBRIC_WORDS.search(window)
        if about_this and (GRADER.search(sentence) or OVERRIDE.search(sentence)):
            return sentence[:120]
        if MARKER.search(sentence) and RUBRIC_WORDS.search(window) and RESULT_WORDS.search(window):
            return sentence[:120]
    return None


def _instruction(sentence: str) -> bool:
    """A grading verb and a grading result that are not the same words ("la note maximale" is no verb)."""
    results = [m.span() for m in RESULT.finditer(sentence)]
    return bool(results) and any(
        not any(start < r_end and r_start < end for r_start, r_end in results)
        for start, end in (m.span() for m in VERB.finditer(sentence))
    )


def _copied_criteria(response: str, rubric: Rubric | None) -> list[str]:
    if rubric is None:
        return []
    words = _fold(response).split()
    trigrams = set(zip(words, words[1:], words[2:]))
    folded = " " + " ".join(words) + " "
    copied = []
    for criterion in rubric.criteria:
        c = _fold(criterion.text).split()
        if len(c) < 5:  # short criteria ("Is concise.") recur by chance
            continue
        grams = list(zip(c, c[1:], c[2:]))
        if f" {' '.join(c)} " in folded or sum(g in trigrams for g in grams) >= 0.9 * len(grams):
            copied.append(criterion.text)
    return copied


def _readable(text: str) -> str:
    """The text as a judge model reads it, with every long base64 run that decodes to text appended decoded."""
    text = INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    decoded = []
    for run in BASE64_RUN.findall(text):
        try:
            plain = base64.b64decode(run + "=" * (-len(run) % 4), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        if plain.isprintable() or all(ch.isprintable() or ch.isspace() for ch in plain):
            decoded.append(plain)
    return "\n\n".join([text, *decoded])


def _fold(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _quote(match: re.Match) -> str:
    return repr(match.group(0).strip()[:80])
