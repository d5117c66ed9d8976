"""An Inspect AI evaluation whose tools run in our sandbox: ``sandbox="sandbox-docker"``.

The model is Inspect's ``mockllm`` playing a scripted agent (one bash call, then an answer), so
this runs offline; put a real model name in ``eval(..., model=...)`` for a real evaluation.

Run: python examples/inspect_task.py   (needs: pip install 'sandbox[inspect]')
"""

from __future__ import annotations

import tempfile
import warnings

from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageTool, Model, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import bash


@task
def arithmetic() -> Task:
    return Task(
        dataset=[Sample(input="What is 6 * 7? Use python in the sandbox.", target="42")],
        solver=[use_tools(bash()), generate()],
        scorer=includes(),
        sandbox="sandbox-docker",  # our provider, found through Inspect's entry point
    )


def scripted_model() -> Model:
    """A model that asks for one bash call, then answers. Token usage is given, so mockllm
    need not count tokens (its tokenizer would be fetched from the network)."""
    usage = ModelUsage(input_tokens=10, output_tokens=10, total_tokens=20)
    outputs = [
        ModelOutput.for_tool_call(
            "mockllm/model", "bash",
            {"command": "id -un; python3 -c 'print(6 * 7)' | tee answer.txt"}),
        ModelOutput.from_content("mockllm/model", "The answer is 42."),
    ]
    for output in outputs:
        output.usage = usage
    return get_model("mockllm/model", custom_outputs=outputs)


def main() -> None:
    # Inspect 0.3.285's per-sample hook emitter never closes its receive stream (inspect_ai/
    # hooks/_hooks.py, start_sample_event_emitter): its ResourceWarning is Inspect's, not ours.
    warnings.filterwarnings("ignore", r"Unclosed <MemoryObjectReceiveStream", ResourceWarning)
    with tempfile.TemporaryDirectory() as logs:
        [log] = eval(arithmetic(), model=scripted_model(), log_dir=logs, display="none")
        assert log.samples is not None and log.results is not None
        sandbox = log.eval.sandbox.type if log.eval.sandbox else None
        print(f"eval: {log.status}, sandbox: {sandbox}")
        for message in log.samples[0].messages:
            if isinstance(message, ChatMessageTool):
                print(f"bash in the sandbox said: {message.text.strip()!r}")
        score = log.results.scores[0]
        print(f"{score.name}: accuracy {score.metrics['accuracy'].value}")


if __name__ == "__main__":
    main()
