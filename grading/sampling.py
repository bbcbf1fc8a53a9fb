"""Sample answers and grade them against a rubric: the step RuFT runs per query, and synthesis runs to pick its
contrast pair from a pool (SynthesisConfig.contrast_pool)."""

from dataclasses import replace

from grading.grader import Graded, GradeItem, Grader
from grading.rubric import Rubric
from grading.select import Candidate
from rubricrl.llm import ChatResult, LLMClient
from rubricrl.llm.reasoning import as_written


async def sample_and_grade(
    client: LLMClient,
    grader: Grader,
    roles: list[str],
    conversation: list[dict[str, str]],
    rubric: Rubric,
    reference: str | None = None,
) -> tuple[list[ChatResult], list[Graded]]:
    """One answer per entry of `roles` (repeat a role for several: requests that would be identical share one
    n-sample call), each graded against `rubric`; identical answers are graded once. Each answer's text is the
    completion as the policy wrote it (`as_written`: a reasoning parser's reasoning put back between the grading
    delimiters; the grader judges the answer alone), and a reply without content is a candidate without an
    answer, not a failed query."""
    delimiters = grader.config.reasoning_delimiters
    answers = [
        replace(a, texts=[as_written(text, reasoning, delimiters) for text, reasoning in zip(a.texts, a.reasonings)])
        for a in await client.chat_each(roles, conversation, allow_empty=True)
    ]
    graded = await grader.grade_many([GradeItem(conversation, a.text, rubric, reference) for a in answers])
    return answers, graded


def candidates(answers: list[ChatResult], graded: list[Graded]) -> list[Candidate]:
    """What selection ranks: each answer's text, score, whether the integrity check flagged it, whether it was cut
    off at max_tokens and whether it has an answer at all."""
    return [
        Candidate(
            i, a.text, g.score, g.integrity_flag is not None, a.finish_reasons[0] == "length", g.no_answer is not None
        )
        for i, (a, g) in enumerate(zip(answers, graded))
    ]
