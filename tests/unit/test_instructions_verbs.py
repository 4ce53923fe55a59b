"""The kind an instruction asks for, read by its verb, and what decided a question's kind: general
English forms, not any dataset's."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.core.instructions import imperative_kind
from serve_app.core.question_parsing import read_kind, read_question

pytestmark = pytest.mark.unit

FORMS = [
    # counting verbs: a number
    ("Count the shapes.", "number", "imperative:count"),
    ("Please count the people in the photo", "number", "imperative:count"),
    ("Can you count the cars?", "number", "imperative:count"),
    ("Calculate the total price shown.", "number", "imperative:calculate"),
    ("Add up the numbers on the dice.", "number", "imperative:add up"),
    # telling or naming the number of something: a number
    ("Give the number of windows.", "number", "imperative:give"),
    ("Tell me the number of birds.", "number", "imperative:tell me"),
    ("Will you state the count of chairs?", "number", "imperative:state"),
    # whether / if: yes or no
    ("Say whether the light is green.", "yes_no", "imperative:say"),
    ("Tell me if the door is open.", "yes_no", "imperative:tell me"),
    ("Check if there is a dog.", "yes_no", "imperative:check"),
    ("Can you tell me whether it is raining?", "yes_no", "imperative:tell me"),
    ("Determine whether the glass is full.", "yes_no", "imperative:determine"),
    # naming, describing: open text
    ("Name the colour.", "text", "imperative:name"),
    ("Describe the scene.", "text", "imperative:describe"),
    ("Could you identify the animal?", "text", "imperative:identify"),
    ("Tell me the colour of the car.", "text", "imperative:tell me"),
    ("List the fruits on the table.", "text", "imperative:list"),
    # questions keep their reading
    ("How many dogs are there?", "number", "number_cue"),
    ("Tell me how many dogs there are.", "number", "number_cue"),
    ("Is the sky blue?", "yes_no", "auxiliary_verb"),
    ("Would you say the shape is round?", "yes_no", "auxiliary_verb"),
    ("Would you describe the shape as round?", "yes_no", "auxiliary_verb"),
    ("What colour is the car?", "text", "default"),
    ("Look at the picture. Count the shapes.", "number", "imperative:count"),
    ("Counting sheep helps you sleep, right", "text", "default"),  # not the verb "count"
    ("Tell me.", "text", "default"),  # asks for nothing in particular
    # polite telling of a thing: open text, never the yes/no its auxiliary verb would make it
    ("Could you tell me what colour the car is?", "text", "imperative:tell me"),
    ("Can you tell me where the cat is?", "text", "imperative:tell me"),
    ("Can you tell me the colour of the car?", "text", "imperative:tell me"),
    ("Can you say it is round?", "yes_no", "auxiliary_verb"),
    # words of quantity that ask for no number
    ("Describe the amount of damage to the car.", "text", "imperative:describe"),
    ("List a number of objects in the picture.", "text", "imperative:list"),
    ("Write a total of three sentences about the image.", "text", "imperative:write"),
    ("Sum up what is happening in the picture.", "text", "default"),
    # a follow-up's linking word opens the sentence, and the sentence after it is read
    ("And is that shape a circle?", "yes_no", "auxiliary_verb"),
    ("So, is the shape red?", "yes_no", "auxiliary_verb"),
    ("OK then count the shapes.", "number", "imperative:count"),
    ("And how many are red?", "number", "number_cue"),
    ("And which shape is it?", "text", "default"),
    ("Andrew is it red?", "text", "default"),  # a name, not the word "and"
    ("So?", "text", "default"),  # nothing after it
]


@pytest.mark.parametrize(("text", "kind", "basis"), FORMS)
def test_a_sentence_is_read_by_its_verb_and_the_trace_says_what_decided(text, kind, basis):
    assert read_kind(text) == (kind, basis)
    question = read_question(text)
    assert (question.kind, question.kind_basis) == (kind, basis)


def test_the_request_options_and_instructions_still_decide_first():
    assert read_question("Count the shapes.", kind="text").kind_basis == "request"
    assert read_question("Count the shapes.", choices=["1", "2"]).kind_basis == "options"
    either = read_question("Is it red or blue?")
    assert (either.kind, either.kind_basis) == ("choice", "either_or")
    told = read_question("Name the colour. Please answer yes or no.")
    assert (told.kind, told.kind_basis) == ("yes_no", "instruction")


@given(st.text(max_size=200))
def test_any_text_reads_as_a_known_kind_or_none(text):
    ordered = imperative_kind(text)
    assert ordered is None or ordered.kind in ("number", "yes_no", "text")
