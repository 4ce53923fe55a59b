"""The answer kind an instruction asks for, read by its verb: "Count the shapes." asks for a number,
"Name the colour." for open text, "Say whether it is red." for yes or no.

A sentence is read as an instruction when it opens with one of the verbs below, after an optional
"please" or a polite request, "can/could/will you (please)" ("would you" asks an opinion: "Would you
describe it as round?" is a yes/no question). Only the verb and what follows it at once decide:

- a counting verb asks for a number;
- a verb of telling followed by "whether" or "if" asks for yes or no;
- a verb of telling or naming (not one that composes: describe, explain, list, write) followed by
  "the number/count/total/amount of" asks for a number ("a number of" means several);
- a polite verb of telling followed by a clause ("Can you say it is round?") is no instruction: it
  stays the yes/no question it reads as; followed by a question word or a noun phrase ("Could you
  tell me what colour the car is?", "Can you tell me the colour?") it asks for open text;
- any other verb of telling or naming asks for open text.

General English, not any dataset's; linear-time patterns. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_POLITE = r"(?:please\s+|(?P<polite>(?:can|could|will)\s+you\s+(?:please\s+)?))?"
_COUNTING = r"count|calculate|compute|tally|total|add\s+up"  # not "sum up": it summarises
_TELLING = (
    r"say|tell(?:\s+me|\s+us)?|state|answer|check|determine|decide|confirm|verify|judge|indicate|"
    r"report|find\s+out|work\s+out"
)
_NAMING = (
    r"name|describe|identify|give(?:\s+me|\s+us)?|list|write(?:\s+down)?|read(?:\s+out)?|explain|specify"
)
_VERB = re.compile(rf"^{_POLITE}(?P<verb>{_COUNTING}|{_TELLING}|{_NAMING})(?![\w'’])", re.IGNORECASE)
_COUNTING_VERB = re.compile(rf"^(?:{_COUNTING})$", re.IGNORECASE)
_TELLING_VERB = re.compile(rf"^(?:{_TELLING})$", re.IGNORECASE)
# Verbs that compose rather than report: "Describe the amount of damage." asks for words, not a number.
_COMPOSING_VERB = re.compile(r"^(?:describe|explain|list|write(?:\s+down)?)$", re.IGNORECASE)
_WHETHER = re.compile(r"^\s+(?:whether|if)(?![\w'’])", re.IGNORECASE)
_QUANTITY = re.compile(r"^\s+(?:the\s+)?(?:number|count|total|amount|sum)\s+of(?![\w'’])", re.IGNORECASE)
# What a polite verb of telling asks about when it asks for a thing: a question word or a noun phrase.
_WHAT = re.compile(
    r"^\s+(?:what|which|where|who|whom|whose|when|why|how|the|a|an|this|that|these|those|its|their)"
    r"(?![\w'’])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Imperative:
    kind: str  # one of answers.ANSWER_KINDS, never "choice"
    verb: str  # the verb it was read by, as written (lower case, single-spaced)


def imperative_kind(sentence: str) -> Imperative | None:
    """The kind ``sentence`` asks for when it is an instruction opening with a known verb, else None."""
    match = _VERB.match(sentence.strip())
    if match is None:
        return None
    verb = " ".join(match["verb"].lower().split())
    rest = sentence.strip()[match.end() :]
    if _COUNTING_VERB.match(verb):
        return Imperative("number", verb)
    if _QUANTITY.match(rest) and not _COMPOSING_VERB.match(verb):
        return Imperative("number", verb)
    if _WHETHER.match(rest):
        return Imperative("yes_no", verb)
    if _TELLING_VERB.match(verb) and not rest.strip(" .!?"):
        return None  # "Tell me." asks nothing
    if _TELLING_VERB.match(verb) and match["polite"] and not _WHAT.match(rest):
        return None  # "Can you say it is red?" is the yes/no question it reads as
    return Imperative("text", verb)
