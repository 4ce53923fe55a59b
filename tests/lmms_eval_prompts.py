"""How lmms-eval 0.7.3 builds the question text of POPE, ChartQA, InfoVQA, MMBench, MMMU,
RealWorldQA and LLaVA-Interleave Bench (in-domain), vendored verbatim by tests/lmms_eval_vendor.py: do
not edit, regenerate.

The functions are copied as they are in lmms-eval; ``config`` and ``mmbench_evaluator`` are the module
globals they read, built from the tasks' own YAML files as lmms-eval builds them.
"""

# ruff: noqa
# mypy: ignore-errors

import ast

import pandas as pd

VERSION = '0.7.3'

# lmms_eval/tasks/pope/pope.yaml
POPE_YAML = {'dataset_path': 'lmms-lab-encoder/POPE', 'dataset_kwargs': {'token': True}, 'task': 'pope', 'test_split': 'test', 'output_type': 'generate_until', 'doc_to_target': 'answer', 'generation_kwargs': {'max_new_tokens': 128, 'temperature': 0, 'top_p': 1.0, 'num_beams': 1, 'do_sample': False}, 'metric_list': [{'metric': 'pope_accuracy', 'higher_is_better': True}, {'metric': 'pope_precision', 'higher_is_better': True}, {'metric': 'pope_recall', 'higher_is_better': True}, {'metric': 'pope_f1_score', 'higher_is_better': True}, {'metric': 'pope_yes_ratio', 'higher_is_better': True}], 'lmms_eval_specific_kwargs': {'default': {'pre_prompt': '', 'post_prompt': '\nAnswer the question using a single word or phrase.'}, 'plm': {'pre_prompt': '', 'post_prompt': '\nYour response must be concise.'}}, 'metadata': [{'version': 0.0}]}

# lmms_eval/tasks/chartqa/chartqa.yaml
CHARTQA_YAML = {'dataset_path': 'lmms-lab-encoder/ChartQA', 'dataset_kwargs': {'token': True}, 'task': 'chartqa', 'test_split': 'test', 'output_type': 'generate_until', 'doc_to_target': 'answer', 'generation_kwargs': {'max_new_tokens': 16, 'temperature': 0, 'do_sample': False}, 'metric_list': [{'metric': 'relaxed_overall', 'aggregation': 'mean', 'higher_is_better': True}, {'metric': 'relaxed_human_split', 'aggregation': 'mean', 'higher_is_better': True}, {'metric': 'relaxed_augmented_split', 'aggregation': 'mean', 'higher_is_better': True}], 'metadata': [{'version': 0.0}], 'lmms_eval_specific_kwargs': {'default': {'pre_prompt': '', 'post_prompt': '\nAnswer the question with a single word.'}, 'qwen_vl': {'pre_prompt': '', 'post_prompt': ' Answer:'}}}

# lmms_eval/tasks/infovqa/_default_template_infovqa_yaml
INFOVQA_YAML = {'dataset_path': 'lmms-lab-encoder/DocVQA', 'dataset_name': 'InfographicVQA', 'dataset_kwargs': {'token': True}, 'doc_to_target': 'answers', 'generation_kwargs': {'max_new_tokens': 32, 'temperature': 0, 'do_sample': False}, 'lmms_eval_specific_kwargs': {'default': {'pre_prompt': '', 'post_prompt': '\nAnswer the question using a single word or phrase.'}}}

# lmms_eval/tasks/mmbench/_default_template_mmbench_en_yaml
MMBENCH_EN_YAML = {'dataset_path': 'lmms-lab-encoder/MMBench', 'dataset_kwargs': {'token': True}, 'doc_to_target': 'answer', 'lmms_eval_specific_kwargs': {'default': {'pre_prompt': '', 'post_prompt': "\nAnswer with the option's letter from the given choices directly."}}, 'model_specific_generation_kwargs': {'llava': {'image_aspect_ratio': 'original'}}, 'output_type': 'generate_until', 'dataset_name': 'en', 'generation_kwargs': {'until': ['ASSISTANT:'], 'max_new_tokens': 1024, 'temperature': 0, 'top_p': 1.0, 'num_beams': 1, 'do_sample': False}}

# lmms_eval/tasks/mmbench/mmbench.yaml
MMBENCH_YAML = {'group': 'mmbench', 'task': ['mmbench_en_dev', 'mmbench_en_test', 'mmbench_cn_dev', 'mmbench_cn_test', 'mmbench_cn_cc', 'mmbench_ru_dev'], 'metadata': {'version': 0.0, 'sys_prompt': 'There are several options:', 'gpt_eval_model_name': 'gpt-3.5-turbo-0613'}}

# lmms_eval/tasks/mmmu/mmmu_val.yaml
MMMU_VAL_YAML = {'dataset_path': 'lmms-lab-encoder/MMMU', 'task': 'mmmu_val', 'tag': ['public_eval_qwen3_5_family', 'public_eval_gpt5_family'], 'test_split': 'validation', 'output_type': 'generate_until', 'doc_to_target': 'answer', 'metric_list': [{'metric': 'mmmu_acc', 'higher_is_better': True}], 'lmms_eval_specific_kwargs': {'default': {'prompt_type': 'format', 'multiple_choice_prompt': "Answer with the option's letter from the given choices directly.", 'open_ended_prompt': 'Answer the question using a single word or phrase.'}, 'qwen3_vl': {'format': 'qwen3_vl', 'pre_prompt': 'Question: ', 'post_prompt': 'Answer with the option letter only.', 'open_ended_prompt': 'Please select the correct answer from the options above.'}}, 'include': '_default_template_yaml'}

# lmms_eval/tasks/mmmu/_default_template_yaml
MMMU_TEMPLATE_YAML = {'generation_kwargs': {'max_new_tokens': 128}, 'metadata': {'version': 0.0, 'interleaved_format': False}}

# lmms_eval/tasks/realworldqa/realworldqa.yaml
REALWORLDQA_YAML = {'dataset_path': 'lmms-lab-encoder/RealWorldQA', 'dataset_kwargs': {'token': True}, 'task': 'realworldqa', 'tag': ['public_eval_qwen3_5_family'], 'test_split': 'test', 'output_type': 'generate_until', 'doc_to_target': 'answer', 'generation_kwargs': {'max_new_tokens': 16, 'temperature': 0, 'top_p': 1.0, 'num_beams': 1, 'do_sample': False}, 'metric_list': [{'metric': 'exact_match', 'aggregation': 'mean', 'higher_is_better': True}], 'lmms_eval_specific_kwargs': {'default': {'pre_prompt': '', 'post_prompt': ''}, 'gpt4v': {'pre_prompt': '', 'post_prompt': ''}, 'xcomposer2_4khd': {'pre_prompt': '[UNUSED_TOKEN_146]user\nQuestion: ', 'post_prompt': '[UNUSED_TOKEN_145]\n[UNUSED_TOKEN_146]assistant\nThe answer is'}}, 'metadata': [{'version': 0.0}]}

# lmms_eval/tasks/llava_interleave_bench/in_domain.yaml
INTERLEAVE_IN_DOMAIN_YAML = {'dataset_path': 'lmms-lab-encoder/LLaVA-NeXT-Interleave-Bench', 'dataset_name': 'in_domain', 'dataset_kwargs': {'token': True}, 'task': 'llava_interleave_bench_in_domain', 'test_split': 'test', 'doc_to_target': 'answer', 'metric_list': [{'metric': 'overall_score', 'higher_is_better': True}], 'generation_kwargs': {'max_new_tokens': 16, 'temperature': 0, 'do_sample': False, 'image_aspect_ratio': 'pad'}, 'lmms_eval_specific_kwargs': {'default': {'oe_post_prompt': '', 'mcq_post_prompt': ''}}}

# lmms_eval/tasks/llava_interleave_bench/in_domain.yaml, its text
INTERLEAVE_IN_DOMAIN_TEXT = 'dataset_path: lmms-lab-encoder/LLaVA-NeXT-Interleave-Bench\ndataset_name: in_domain\ndataset_kwargs:\n  token: True\ntask: "llava_interleave_bench_in_domain"\ntest_split: test\ndoc_to_target: "answer"\ndoc_to_visual: !function utils.doc_to_visual\ndoc_to_text: !function utils.doc_to_text\nprocess_results: !function utils.interleave_process_results\n\nmetric_list:\n  - metric: overall_score\n    aggregation: !function utils.overall_score\n    higher_is_better: true\n\ngeneration_kwargs:\n  max_new_tokens: 16\n  temperature: 0\n  do_sample: False\n  image_aspect_ratio: "pad" # for multi-image, we treat each image as original aspect ratio without anyres strategy.\n\nlmms_eval_specific_kwargs:\n  default:\n    oe_post_prompt: ""\n    mcq_post_prompt: ""\n'

# lmms_eval/tasks/realworldqa/utils.py
REPLACE_PROMPT = "Please answer directly with only the letter of the correct option and nothing else."

# lmms_eval/tasks/mmbench/mmbench_evals.py: MMBench_Evaluator, the constructor reduced to the prompt it keeps
class MMBench_Evaluator:
    def __init__(self, sys_prompt):
        self.sys_prompt = sys_prompt

    def create_options_prompt(self, row_data, option_candidate):
        available_keys = set(row_data.keys()) & set(option_candidate)
        options = {cand: row_data[cand] for cand in available_keys if row_data[cand]}
        sorted_options = dict(sorted(options.items()))
        options_prompt = f"{self.sys_prompt}\n"
        for key, item in sorted_options.items():
            if pd.notna(item) and item != "nan":
                options_prompt += f"{key}. {item}\n"
        return options_prompt.rstrip("\n"), sorted_options

# lmms_eval/tasks/mmbench/en_utils.py and mmmu/utils.py: their module globals
mmbench_evaluator = MMBench_Evaluator(sys_prompt=MMBENCH_YAML["metadata"]["sys_prompt"])
config = MMMU_TEMPLATE_YAML

# lmms_eval/tasks/pope/utils.py
def pope_doc_to_text(doc, lmms_eval_specific_kwargs):
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "")
    # Assuming the 'doc' dictionary has a key 'question' with the question text
    question = doc["question"].strip()
    return f"{pre_prompt}{question}{post_prompt}"

# lmms_eval/tasks/chartqa/utils.py
def chartqa_doc_to_text(doc, lmms_eval_specific_kwargs):
    question = doc["question"]
    pre_prompt = lmms_eval_specific_kwargs["pre_prompt"]
    post_prompt = lmms_eval_specific_kwargs["post_prompt"]
    return f"{pre_prompt}{question}{post_prompt}"

# lmms_eval/tasks/infovqa/utils.py
def infovqa_doc_to_text(doc, lmms_eval_specific_kwargs):
    question = doc["question"]
    pre_prompt = lmms_eval_specific_kwargs["pre_prompt"]
    post_prompt = lmms_eval_specific_kwargs["post_prompt"]
    return f"{pre_prompt}{question}{post_prompt}"

# lmms_eval/tasks/mmbench/en_utils.py
def mmbench_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    option_candidate = ["A", "B", "C", "D", "E"]
    options_prompt, options_dict = mmbench_evaluator.create_options_prompt(doc, option_candidate)

    data = {
        # "img": doc["image"],
        "question": doc["question"],
        "answer": doc.get("answer", None),
        "options": options_prompt,
        "category": doc["category"],
        "L2-category": doc["L2-category"],
        "options_dict": options_dict,
        "index": doc["index"],
        "hint": doc["hint"],
        "source": doc["source"],
        "split": doc["split"],
    }

    query_prompt = f"{data['hint']} {data['question']} {data['options']}" if pd.notna(data["hint"]) and data["hint"] != "nan" else f"{data['question']} {data['options']}"

    if lmms_eval_specific_kwargs:
        query_prompt = f"{query_prompt}\n{lmms_eval_specific_kwargs['post_prompt']}"

    return query_prompt

# lmms_eval/tasks/mmmu/utils.py
def replace_images_tokens(input_string):
    for i in range(1, 8):
        question_text = f"<image {i}>"
        query_text = "<image>"
        if question_text in input_string:
            input_string = input_string.replace(question_text, query_text)
    return input_string

# lmms_eval/tasks/mmmu/utils.py
def parse_options(options):
    option_letters = [chr(ord("A") + i) for i in range(len(options))]
    choices_str = "\n".join([f"{option_letter}. {option}" for option_letter, option in zip(option_letters, options)])
    return choices_str

# lmms_eval/tasks/mmmu/utils.py
def construct_prompt(doc, mc_prompt="", open_ended_prompt="", prompt_type="reasoning"):
    question = doc["question"]
    if doc["question_type"] == "multiple-choice":
        # Weirdly, data["options"] is a string in MMMU Huggingface dataset
        parsed_options = parse_options(ast.literal_eval(doc["options"]))
        # parsed_options already prepends a newline so no need to add space here
        question = f"{question}\n{parsed_options}\n\n{mc_prompt}"
    else:
        question = f"{question}\n\n{open_ended_prompt}"

    return question

# lmms_eval/tasks/mmmu/utils.py
def mmmu_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        question = construct_prompt(doc)
    elif "format" in lmms_eval_specific_kwargs and lmms_eval_specific_kwargs["format"] == "qwen3_vl":
        return mmmu_doc_to_text_qwen3vl(doc, lmms_eval_specific_kwargs)
    else:
        question = construct_prompt(doc, lmms_eval_specific_kwargs["multiple_choice_prompt"], lmms_eval_specific_kwargs["open_ended_prompt"], lmms_eval_specific_kwargs["prompt_type"])
    if config["metadata"]["interleaved_format"]:
        question = replace_images_tokens(question)

    return question

# lmms_eval/tasks/mmmu/utils.py
def mmmu_doc_to_text_qwen3vl(doc, lmms_eval_specific_kwargs=None):
    """
    Adapted from Qwen3-VL Technical Report: https://arxiv.org/pdf/2511.21631
    """
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "")
    open_ended_prompt = lmms_eval_specific_kwargs.get("open_ended_prompt", "")

    question = doc["question"]
    options = parse_options(ast.literal_eval(doc["options"]))
    question_type = doc["question_type"]

    if question_type == "multiple-choice":
        prompt = f"{pre_prompt}{question}\nOptions:\n{options}\n{post_prompt}"
    else:
        # open ended question
        prompt = f"{pre_prompt}{question}\nOptions:\n{options}\n{open_ended_prompt}"

    return prompt

# lmms_eval/tasks/realworldqa/utils.py
def realworldqa_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        lmms_eval_specific_kwargs = {}
    pre_prompt = ""
    post_prompt = ""
    question = doc["question"].strip()
    if "pre_prompt" in lmms_eval_specific_kwargs:
        pre_prompt = lmms_eval_specific_kwargs["pre_prompt"]
    if "post_prompt" in lmms_eval_specific_kwargs and lmms_eval_specific_kwargs["post_prompt"]:
        question = question.replace(REPLACE_PROMPT, "")
        post_prompt = lmms_eval_specific_kwargs["post_prompt"]
    return f"{pre_prompt}{question}{post_prompt}"

# lmms_eval/tasks/llava_interleave_bench/utils.py
def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        lmms_eval_specific_kwargs = {}

    oe_post_prompt = ""
    if "oe_post_prompt" in lmms_eval_specific_kwargs:
        oe_post_prompt = lmms_eval_specific_kwargs["oe_post_prompt"]

    mcq_post_prompt = ""
    if "mcq_post_prompt" in lmms_eval_specific_kwargs:
        mcq_post_prompt = lmms_eval_specific_kwargs["mcq_post_prompt"]

    user_prompt = doc["question"]

    if mcq_post_prompt != "" and doc["question_type"] == "multi-choice":
        user_prompt = user_prompt.split("Your answer is:")[0].split("\n")[0].strip()
        user_prompt = f"{user_prompt}\n{mcq_post_prompt}"

    if oe_post_prompt != "" and doc["question_type"] == "open-ended":
        user_prompt = f"{user_prompt}\n{oe_post_prompt}"

    return user_prompt
