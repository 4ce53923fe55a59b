"""The demo training loop, run briefly: the token layout it trains on is the one the Qwen3-VL
processor (and so vLLM) builds, labels cover only the answer, and what it writes loads and answers."""

import json
import random
from dataclasses import replace

import pytest

from harness.easy_vqa import QA, facts_by_image, load_questions, question_type, question_variant
from serve_app.core.answers import extract_answer
from serve_app.core.prompts import PromptKind
from training.demo import cli, phases, validation
from training.demo.corpus import Collator, drill_batch, load_corpus
from training.demo.recipes import DEMO_LARGE, DEMO_SMALL, IMAGE_PIXELS
from training.demo.trainer import train
from training.demo_data import PromptMix, comparison_drill, make_example, tokenizer_corpus
from training.tiny import build_model, build_processor, build_tokenizer


@pytest.fixture(scope="module")
def setup():
    qas, paths = load_questions()
    few = [qa for qa in qas if qa.image_id < 24]
    tokenizer = build_tokenizer(tokenizer_corpus(few, facts_by_image(few)), normalize=True)
    processor = build_processor(
        tokenizer,
        min_pixels=IMAGE_PIXELS,
        max_pixels=IMAGE_PIXELS,
        patch_size=DEMO_SMALL.model.patch_size,
    )
    corpus = load_corpus(processor, few, paths, held_out={20, 21, 22, 23}, progress=False)
    return tokenizer, processor, corpus, paths


@pytest.mark.slow  # trains or builds models with torch
def test_training_layout_matches_the_processor(setup):
    from PIL import Image

    tokenizer, processor, corpus, paths = setup
    collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
    qa = QA(0, "is there not a red shape?", "yes")
    example = make_example(
        "data:,", qa, corpus.facts[0], PromptKind.REASONING, random.Random(0), PromptMix(0, 1, 0, 0)
    )
    prompt_ids, target_ids = collator.ids(example)
    text = processor.apply_chat_template(example.messages, tokenize=False, add_generation_prompt=True)
    with Image.open(paths[0]) as image:
        reference = processor(text=[text], images=[image.convert("RGB")], return_tensors="pt")
    assert prompt_ids == reference["input_ids"][0].tolist()
    # 64x64 upscaled to 128x128, 8-pixel patches merged 2x2: 64 image tokens
    assert prompt_ids.count(collator.image_pad) == 64
    assert tokenizer.decode(target_ids) == example.target.lower() + "<|im_end|>"  # the normalizer lower-cases
    batch = collator(
        [
            example,
            make_example(
                "x", qa, corpus.facts[0], PromptKind.SIMPLE, random.Random(0), PromptMix(1, 0, 0, 0)
            ),
        ]
    )
    labelled = batch["labels"] != -100
    assert labelled.sum(-1).tolist() == [len(target_ids), len(tokenizer("[[yes]]")["input_ids"]) + 1]
    assert (batch["mm_token_type_ids"].sum(-1) == 64).all()


@pytest.mark.slow  # trains or builds models with torch
def test_conversation_batches_hold_every_image_in_prompt_order(setup):
    from PIL import Image

    from harness.multi_turn import follow_up, image_pair
    from training.demo.corpus import batch_of
    from training.demo_conversations import conversation_example

    tokenizer, processor, corpus, paths = setup
    collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
    rng = random.Random(0)
    pair = image_pair(corpus.facts, 1, 2, rng, held_out=False)
    example = conversation_example(pair, corpus.facts, PromptKind.REASONING, rng, PromptMix(0, 1, 0, 0))
    prompt_ids, _ = collator.ids(example)
    text = processor.apply_chat_template(example.messages, tokenize=False, add_generation_prompt=True)
    images = []
    for image_id in (1, 2):
        with Image.open(paths[image_id]) as image:
            images.append(image.convert("RGB"))
    reference = processor(text=[text], images=images, return_tensors="pt")
    assert prompt_ids == reference["input_ids"][0].tolist()
    assert prompt_ids.count(collator.image_pad) == 2 * 64
    # a one-image question, a follow-up about image 3 and the pair: four images, in that order
    items = [QA(0, "what color is the shape?", "x"), follow_up(corpus.facts[3], 3, rng, held_out=False), pair]
    batch = batch_of(corpus, items, [PromptKind.SIMPLE] * 3, collator, rng, PromptMix(1, 0, 0, 0))
    assert batch["image_grid_thw"].shape[0] == 4
    patches = corpus.pixels[0].shape[0]
    for index, image_id in enumerate((0, 3, 1, 2)):
        rows = batch["pixel_values"][index * patches : (index + 1) * patches]
        assert (rows == corpus.pixels[image_id]).all()
    assert batch["mm_token_type_ids"].sum(-1).tolist() == [64, 64, 128]


@pytest.mark.slow  # trains or builds models with torch
def test_a_short_run_lowers_the_loss_and_writes_a_checkpoint_that_answers(setup, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    tokenizer, processor, corpus, _ = setup
    spec = replace(
        DEMO_SMALL,
        steps=60,
        batch_size=16,
        vision_pretrain_steps=10,
        comparison_drill_steps=5,
        text_reasoning_steps=10,
        drill_every=4,
    )
    drill_batches = []
    original_drill_loss = phases.drill_loss
    monkeypatch.setattr(
        phases, "drill_loss", lambda *args: drill_batches.append(1) or original_drill_loss(*args)
    )
    report = train(spec, corpus, tokenizer, processor, tmp_path, max_minutes=5, progress=False)
    assert report["steps"] == 60 and not report["stopped_early"]
    assert report["vision_pretraining"]["steps"] == 10
    assert report["text_reasoning"]["steps"] == 10
    assert report["comparison_drill"]["steps"] == 5
    assert len(drill_batches) == 5 + 60 // 4  # the drill, then one drill step after every 4th step
    assert report["final_loss"] < 3.0  # from about 6.2 (uniform over 512 tokens)
    folder = tmp_path / "demo-small"
    assert json.loads((folder / "mai-demo.json").read_text())["spec"]["model"]["name"] == "demo-small"
    # The report names the layout the model learnt, and its accuracy on people's phrasings.
    assert report["prompt_layout"] == "separate_line"
    phrased = report["validation_phrased_simple_accuracy"]
    assert set(phrased) == {"seen", "held out"} and all(0 <= v <= 1 for v in phrased["seen"].values())
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32)
    assert model.config.text_config.hidden_size == spec.model.hidden_size
    # the verdict's accuracy at the end is the written model's
    at_end = report["comparison_drill"]["verdict_accuracy_at_end"]
    assert at_end == validation.checked_verdict_accuracy(model, tokenizer)
    # The checkpoint's own tokenizer, loaded the way vLLM loads it, keeps the normalizer: a question
    # as a client types it is the same tokens as its display form.
    loaded = AutoProcessor.from_pretrained(folder).tokenizer
    rng = random.Random(3)
    display = "Is there not a red shape in the image?"
    assert {tuple(loaded(question_variant(display, rng))["input_ids"]) for _ in range(40)} == {
        tuple(loaded(display)["input_ids"])
    }
    assert loaded("What is the  BLUE shape ?")["input_ids"] == loaded("what is the blue shape")["input_ids"]
    stopped = train(
        replace(spec, steps=10_000),
        corpus,
        tokenizer,
        processor,
        tmp_path / "cut",
        max_minutes=0.05,
        progress=False,
    )
    assert stopped["stopped_early"] and stopped["steps"] < 10_000


@pytest.mark.slow  # trains or builds models with torch
def test_the_transfer_phase_trains_transfer_batches_keeping_simple_ones_at_its_own_rate(
    setup, tmp_path, monkeypatch
):
    tokenizer, processor, corpus, _ = setup
    spec = replace(
        DEMO_LARGE,
        model=DEMO_SMALL.model,
        steps=4,
        batch_size=4,
        vision_pretrain_steps=0,
        comparison_drill_steps=0,
        simple_warmup_steps=0,
        transfer_steps=8,
        transfer_learning_rate=5e-4,
    )
    kinds, rates = [], []
    original_batch_of = phases.batch_of
    original_step = phases.optimizer_step

    def recording_batch_of(corpus, qas, prompt_kinds, *args, **kwargs):
        kinds.append(prompt_kinds[0])
        return original_batch_of(corpus, qas, prompt_kinds, *args, **kwargs)

    def recording_step(optimizer, *args):
        rates.append(optimizer.param_groups[0]["lr"])
        return original_step(optimizer, *args)

    monkeypatch.setattr(phases, "batch_of", recording_batch_of)
    monkeypatch.setattr(phases, "optimizer_step", recording_step)
    monkeypatch.setattr(validation, "TRANSFER_CHECKED", 2)
    monkeypatch.setattr(validation, "REASONING_CHECKED", 2)
    report = train(spec, corpus, tokenizer, processor, tmp_path, max_minutes=5, progress=False)
    assert report["transfer_phase"]["steps"] == 8 and not report["stopped_early"]
    assert report["transfer_phase"]["final_loss"] is not None
    phase = kinds[4:12]  # the main steps' 4 batches come first
    assert phase == [PromptKind.TRANSFER] * 3 + [PromptKind.SIMPLE] + [PromptKind.TRANSFER] * 3 + [
        PromptKind.SIMPLE
    ]
    assert rates[4:12] == [5e-4] * 8 and 5e-4 not in rates[:4]
    # a run stopped at --max-minutes before the phase skips it
    cut = train(
        replace(spec, steps=10_000),
        corpus,
        tokenizer,
        processor,
        tmp_path / "cut",
        max_minutes=0.02,
        progress=False,
    )
    assert cut["stopped_early"] and cut["steps"] < 10_000 and cut["transfer_phase"]["steps"] == 0
    with pytest.raises(ValueError, match="transfer_steps"):
        replace(spec, transfer_steps=-1)


@pytest.mark.slow  # trains or builds models with torch
def test_the_transfer_check_gives_right_and_wrong_references(setup, monkeypatch):
    tokenizer, _, corpus, _ = setup
    qas = [qa for qa in corpus.train if qa.image_id in corpus.facts][:12]
    seen = []

    def record(model, corpus, collator, chunk, examples):
        seen.append(examples)
        return [index % 2 == 0 for index in range(len(examples))]

    monkeypatch.setattr(validation, "greedy_matches", record)
    collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
    model = type("Model", (), {"eval": lambda self: self, "train": lambda self: self})()
    report = validation.transfer_accuracy(model, corpus, collator, qas)
    right, wrong = seen
    for qa, with_right, with_wrong in zip(qas, right, wrong, strict=True):
        # the right reference reaches the true answer, which is the target; the wrong one reaches
        # another, and the check asks whether the model repeats it
        assert with_right.target == f"[[{qa.answer}]]"
        assert extract_answer(with_right.messages[0]["content"][-1]["text"]) == qa.answer
        wrong_answer = extract_answer(with_wrong.messages[0]["content"][-1]["text"])
        assert wrong_answer != qa.answer and with_wrong.target == f"[[{wrong_answer}]]"
    kinds = [question_type(qa.question, qa.answer) for qa in qas]
    assert set(report) == set(kinds)
    for kind, shares in report.items():
        rows = [index for index, k in enumerate(kinds) if k == kind]
        expected = round(sum(index % 2 == 0 for index in rows) / len(rows), 3)
        assert shares == {"accuracy, right reference": expected, "follows a wrong reference": expected}


@pytest.mark.parametrize(
    ("models", "cores", "jobs", "threads", "plan"),
    [
        (2, 2, None, None, (2, 1)),  # both side by side, a core each
        (1, 2, None, None, (1, 2)),  # one model gets every core
        (2, 8, None, None, (2, 4)),
        (2, 1, None, None, (1, 1)),  # one core: one after the other
        (2, 2, 1, None, (1, 2)),
        (2, 2, None, 3, (2, 3)),
    ],
)
def test_models_train_side_by_side_sharing_the_cores(models, cores, jobs, threads, plan):
    assert cli.side_by_side(models, cores, jobs=jobs, threads=threads) == plan


@pytest.mark.parametrize("option", ["--jobs", "--threads", "--steps"])
def test_counts_below_one_are_refused(option, capsys):
    with pytest.raises(SystemExit):
        cli.main([option, "0"])
    assert f"{option} must be at least 1" in capsys.readouterr().err


def test_type_weights_are_checked():
    with pytest.raises(ValueError, match="type_weights"):
        replace(DEMO_SMALL, type_weights=(("colour", 1),))
    with pytest.raises(ValueError, match="type_weights"):
        replace(DEMO_SMALL, type_weights=(("shape", 0),))


def test_the_warm_up_is_simple_only_then_the_mix_decides():
    spec = replace(DEMO_SMALL, mix=PromptMix(0, 1, 0, 0), steps=20, simple_warmup_steps=5)
    rng = random.Random(0)
    kinds = [spec.prompt_kind(step, rng) for step in range(20)]
    assert kinds == [PromptKind.SIMPLE] * 5 + [PromptKind.REASONING] * 15
    with pytest.raises(ValueError, match="simple_warmup_steps"):
        replace(spec, simple_warmup_steps=-1)


@pytest.mark.slow  # trains or builds models with torch
def test_vision_pretraining_trains_the_tower_only_and_stops_at_the_deadline(setup):
    import time

    import torch

    tokenizer, _, corpus, _ = setup
    spec = replace(DEMO_SMALL, vision_pretrain_steps=5, batch_size=8)
    model = build_model(spec.model, tokenizer, dtype="float32").train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    report = phases.pretrain_vision(
        model, corpus, spec, random.Random(0), deadline=time.monotonic() + 60, progress=False
    )
    assert report["steps"] == 5 and report["validation_images"] == 4
    assert set(report["validation_probe_accuracy"]) == {"colour", "shape"}
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and all(name.startswith("model.visual.") for name in changed)
    assert model.training  # left ready for the text phase
    late = phases.pretrain_vision(
        model, corpus, spec, random.Random(0), deadline=time.monotonic() - 1, progress=False
    )
    assert late["steps"] == 0
    with pytest.raises(ValueError, match="vision_pretrain_steps"):
        replace(spec, vision_pretrain_steps=-1)


@pytest.mark.slow  # trains or builds models with torch
def test_the_drill_checks_the_verdict_token_and_stops_at_the_deadline(setup):
    import time
    from types import SimpleNamespace

    import torch

    tokenizer = setup[0]
    sentences = [comparison_drill(random.Random(seed)) for seed in range(40)]
    batch, verdicts = drill_batch(tokenizer, sentences)
    for row, at in enumerate(verdicts):
        assert tokenizer.decode(batch["input_ids"][row, at]).strip() in ("match", "differ")
        labelled = (batch["labels"][row] != -100).nonzero().flatten()
        assert labelled[0] == at and labelled[-1] == batch["attention_mask"][row].sum() - 1

    class Oracle(torch.nn.Module):
        """Predicts each next token; ``swap`` turns every verdict into the other one."""

        def __init__(self, swap: bool):
            super().__init__()
            self.swap = swap
            self.match, self.differ = (tokenizer(f"they {w}")["input_ids"][-1] for w in ("match", "differ"))

        def forward(self, input_ids, attention_mask):
            following = torch.cat([input_ids[:, 1:], input_ids[:, :1]], dim=1)
            if self.swap:
                following = following.clone()
                is_match, is_differ = following == self.match, following == self.differ
                following[is_match], following[is_differ] = self.differ, self.match
            return SimpleNamespace(logits=torch.nn.functional.one_hot(following, 512).float())

    assert validation.verdict_accuracy(Oracle(swap=False).train(), tokenizer, sentences) == 1.0
    swapped = Oracle(swap=True).train()
    assert validation.verdict_accuracy(swapped, tokenizer, sentences) == 0.0
    assert swapped.training  # left as it was found

    spec = replace(DEMO_SMALL, comparison_drill_steps=2)
    model = build_model(spec.model, tokenizer, dtype="float32").train()
    report = phases.drill_comparison(
        model, tokenizer, spec, random.Random(0), deadline=time.monotonic() + 60, progress=False
    )
    assert report["steps"] == 2 and 0 <= report["verdict_accuracy"] <= 1
    late = phases.drill_comparison(
        model, tokenizer, spec, random.Random(0), deadline=time.monotonic() - 1, progress=False
    )
    assert late["steps"] == 0
    with pytest.raises(ValueError, match="comparison_drill_steps"):
        replace(spec, comparison_drill_steps=-1)
    with pytest.raises(ValueError, match="drill_every"):
        replace(spec, drill_every=-1)


@pytest.mark.slow  # trains or builds models with torch
def test_text_reasoning_trains_on_text_only_yes_no_reasoning_and_leaves_the_tower_alone(setup, monkeypatch):
    import time

    import torch

    tokenizer, _, corpus, _ = setup
    collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
    spec = replace(DEMO_SMALL, text_reasoning_steps=3, batch_size=4)
    model = build_model(spec.model, tokenizer, dtype="float32").train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    seen = []
    original = phases.make_example

    def recording(image_url, qa, facts, kind, *args, **kwargs):
        seen.append((image_url, qa.answer, kind))
        return original(image_url, qa, facts, kind, *args, **kwargs)

    monkeypatch.setattr(phases, "make_example", recording)
    report = phases.pretrain_text_reasoning(
        model, corpus, collator, spec, random.Random(0), deadline=time.monotonic() + 60, progress=False
    )
    assert report["steps"] == 3 and report["final_loss"] > 0
    assert len(seen) == 12
    assert {(url, kind) for url, _, kind in seen} == {(None, PromptKind.REASONING)}
    assert {answer for _, answer, _ in seen} <= {"yes", "no"}
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and not any(name.startswith("model.visual.") for name in changed)
    late = phases.pretrain_text_reasoning(
        model, corpus, collator, spec, random.Random(0), deadline=time.monotonic() - 1, progress=False
    )
    assert late == {"steps": 0, "final_loss": None}
    with pytest.raises(ValueError, match="text_reasoning_steps"):
        replace(spec, text_reasoning_steps=-1)


@pytest.mark.slow  # trains or builds models with torch
def test_reasoning_accuracy_reads_the_generated_answer_of_each_question_in_order(setup):
    import torch

    from training.demo_data import reasoning_text

    tokenizer, _, corpus, _ = setup
    collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
    images = sorted(corpus.facts)[:6]
    qas = [QA(image, "what color is the shape?", corpus.facts[image].colour) for image in images]
    wrong = {images[1], images[4]}

    class Writes:
        """Generates the true reasoning, except for the images in ``wrong`` (a wrong final answer)."""

        training = True

        def eval(self):
            self.training = False
            return self

        def train(self):
            self.training = True
            return self

        def generate(self, input_ids, **_):
            assert not self.training
            rows = []
            for qa in batch_qas.pop(0):
                text = reasoning_text(corpus.facts[qa.image_id], qa.question)
                if qa.image_id in wrong:
                    text = text.rsplit("[[", 1)[0] + "[[none]]"
                rows.append(tokenizer(text, add_special_tokens=False)["input_ids"] + [collator.end])
            width = max(map(len, rows))
            tails = torch.tensor([row + [collator.pad] * (width - len(row)) for row in rows])
            return torch.cat([input_ids, tails], dim=1)

    batch_qas = [qas[:4], qas[4:]]
    model = Writes()
    assert validation.reasoning_accuracy(model, corpus, collator, qas, batch_size=4) == 4 / 6
    assert model.training and not batch_qas
