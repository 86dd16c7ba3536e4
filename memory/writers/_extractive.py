"""The built-in extractive writer: memory without a model.

The demo, the stress runs and any deployment without a model still need a
writer that turns turns into topics, and one that is cheap and predictable
enough to run thousands of times a second. This one reads no network and
calls no model: it splits each trusted record into sentences, keeps the
useful ones (statements of a few words; not questions, pleasantries or
small talk of either side), files each under one subject topic by keyword
rules, and cites it with the record's raw handle. The same batch on the
same snapshot always gives the same edits.

A paragraph says who said it and when, in the speaker's own words::

    Caroline (8 May 2023): I went to a support group yesterday (7 May 2023).[^e1]

The name comes from the record's speaker field only (:func:`speaker_name`;
the content is never evidence of who speaks), the day is the record's UTC
date (the footnote's time), and relative dates are resolved against it
(:mod:`memory.ledger._dates`). A first-person sentence is quoted, not
rewritten in the third person: "I" is unambiguous next to the name, and
the words stay the speaker's, quotable and searchable as they were said.

Subjects, first rule that matches wins (a subject continues in
``<subject>-2.md``, ``-3.md``... once a file holds :data:`SHARD_LIMIT`
paragraphs):

    topics/decisions.md     decided, agreed, will go with, plan to, chose...
    topics/preferences.md   prefer, like, love, hate, favourite, enjoy...
    topics/people.md        family, friends, colleagues, names
    topics/projects.md      project, repository, release, deadline, deploy...
    topics/core.md          what stays true: identity, constraints, long-term goals
                            (my name is, I live in, allergic, vegetarian, my goal...)
    topics/notes.md         everything else worth keeping (what happened, opinions)

A sentence already in the topic (same speaker and words, ignoring case,
spacing, the final punctuation and the day it was said) is merged instead
of duplicated: the new record joins the
sources of the paragraph's last footnote when that footnote has the same
date (and is not shared with another paragraph), else the paragraph gains a
new citation. A record already cited by that paragraph adds nothing, so
writing a batch twice changes nothing. A paragraph cites at most
:data:`EVIDENCE_LIMIT` sources: past that, a turn that repeats it says
nothing memory does not know, and it is logged like chatter (below).
Without the bound, a fact said in every session grew one footnote line
without end, and every batch re-parsed and re-rendered it: the cost of a
batch grew with the whole history, quadratically in time and in memory.

Every trusted record of a batch is cited. The runtime marks a batch only
when its commit changes memory (SPEC §6.4), and batches are a branch's
oldest owed turns: a batch of chatter that changed nothing would stay owed
forever and block every later turn of its branch. So the records that state
no new fact are logged as one dated unit per batch in
``topics/conversations.md`` (sharded like the subjects): "Conversation on
2026-11-30: nothing new to keep (3 turns)." citing each of them. A re-delivered batch finds them all cited and
changes nothing again.

The writer emits the draft form of SPEC §5: existing paragraphs unchanged
(their ids and links), new citations as local labels ``[^eN]`` with raw
handles; the transaction assigns every id.
"""

from __future__ import annotations

import datetime
import functools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import anyio.to_thread

from memory._errors import TopicError
from memory.ledger import absolute_day, resolve_relative_dates
from memory.ledger._records import SourceRecord
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._topic_ids import handle_key, is_source_handle, source_key
from memory.workspace._topics import (
    CITATION,
    Footnote,
    Heading,
    Paragraph,
    SourceLink,
    Topic,
    parse_topic,
    render_topic,
)
from memory.workspace._transaction import TopicReader
from memory.writers._writer import Batch
from store.lowlevel import write_lane

__all__ = [
    "CONVERSATIONS", "EVIDENCE_LIMIT", "SHARD_BYTES", "SHARD_LIMIT", "ExtractiveWriter",
    "carries_a_fact", "extract_edits", "extract_in_worker", "facts_of", "is_small_talk",
    "log_nothing_new",
    "speaker_name", "subject_of", "useful_sentences",
]

_SUBJECTS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("topics/decisions.md", "Decisions", re.compile(
        r"\b(decided|decide|decision|agreed|agree to|will go with|going with|plan to|"
        r"planning to|chose|choose|settled on|let's|we will|we'll)\b", re.IGNORECASE)),
    ("topics/preferences.md", "Preferences", re.compile(
        r"\b(prefers?|preferred|likes?|loves?|hates?|dislikes?|enjoys?|favou?rite|"
        r"rather|can't stand|fond of)\b", re.IGNORECASE)),
    ("topics/people.md", "People", re.compile(
        r"\b(wife|husband|partner|son|daughter|mother|father|mom|dad|brother|sister|"
        r"friend|colleague|boss|manager|team ?mate|neighbou?r|named|name is)\b", re.IGNORECASE)),
    ("topics/projects.md", "Projects", re.compile(
        r"\b(project|repo|repository|release|deadline|deploy|milestone|sprint|"
        r"feature|bug|build|launch|roadmap)s?\b", re.IGNORECASE)),
)
# topics/core.md holds what stays true of a person: who they are, what they
# cannot or will not do, what they are working towards. Everything else
# (what happened, what someone thinks of it) is a note.
_CORE = ("topics/core.md", "Core")
_CORE_FACT = re.compile(
    r"\b(?:my name is|call me|i was born|i grew up|i live in|i'?m from|i am from|i come from|"
    r"i work (?:as|at|for|in)|i'?m (?:a|an) (?:\w+ )?(?:engineer|developer|teacher|nurse|"
    r"doctor|student|artist|writer|designer|manager|lawyer|parent|mom|dad|mother|father|"
    r"counselor|chef|musician|veteran|firefighter|volunteer)|"
    r"allergic|allergy|allergies|intoleran\w*|vegetarian|vegan|gluten|diabetic|"
    r"can'?t eat|cannot eat|don'?t eat|never eat|don'?t drink|never drink|"
    r"my (?:long[- ]term )?goals?|my dream|dream (?:is|of) |want to become|aspire|"
    r"i always|i never|identify as|my pronouns|transgender|married|divorced|"
    r"pregnant|retired|disabled|wheelchair)\b", re.IGNORECASE)
_SELF_NAMED = re.compile(r"(?:I am|I'm|I’m) [A-Z][\w'’-]*[.!]?")
_NOTES = ("topics/notes.md", "Notes")
_CONVERSATIONS = ("topics/conversations.md", "Conversations")
CONVERSATIONS = _CONVERSATIONS[0]
"""Where a batch's turns that state no fact are logged, one dated unit per batch."""
# A sentence ends at . ! ? (or a CJK stop) before whitespace, or at a line
# break; not after an initial ("J.K. Rowling") or a title ("Dr. Seuss").
_SENTENCE_END = re.compile(
    r"(?<=[.!?。！？])(?<![.\s][A-Z]\.)(?<!^[A-Z]\.)(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)"
    r"(?<!\bMrs\.)(?<!\bSt\.)(?<!\bvs\.)\s+|\n+"
)
# Letters or digits; an apostrophe splits a contraction ("I'm" -> "I", "m").
_WORD = re.compile(r"[^\W_]+")
# Scripts written without spaces: a run of ideographs or kana counts as one
# word per two characters, rounded up ("我喜欢喝茶" is three; "谢谢你" two).
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")
# Words that carry no fact on their own: pronouns, articles, particles, and
# the vocabulary of acknowledgement. Verbs (even "is", "am") are not here: a
# subject and a verb are what make "I am Anna." a fact.
_FILLER = frozenset({
    "i", "me", "my", "mine", "you", "your", "yours", "he", "him", "his", "she", "her", "hers",
    "it", "its", "we", "us", "our", "ours", "they", "them", "their", "theirs", "this", "that",
    "these", "those", "there", "here", "a", "an", "the", "and", "or", "but", "so", "to", "of",
    "in", "on", "at", "by", "for", "with", "from", "as", "too", "also", "then", "just", "very",
    "really", "quite", "much", "well", "ok", "okay", "k", "thanks", "thank", "thx", "please",
    "sure", "yes", "yeah", "yep", "yup", "no", "nope", "nah", "hello", "hi", "hey", "bye",
    "goodbye", "great", "good", "cool", "nice", "fine", "noted", "got", "right", "alright",
    "perfect", "awesome", "sounds", "welcome", "sorry", "oh", "ah", "hmm", "um", "uh", "wow",
    "lol", "haha", "morning", "evening", "afternoon", "night", "later", "soon", "again",
    "anyway", "indeed", "exactly", "absolutely", "totally", "definitely", "understood"
})
_PLEASANTRIES = frozenset({
    "no problem", "no worries", "makes sense", "that makes sense", "see you", "see you soon",
    "see you later", "talk later", "talk to you later", "will do", "i will", "go ahead",
    "keep going", "carry on", "let me know", "let me check", "let me see", "i see",
    "i understand", "i agree", "you are right", "you're right", "that's right",
    "that is right", "do it", "done", "retry", "try again", "continue",
})
_MAX_SENTENCE = 600

# Small talk: what either side says to keep a conversation going. It states
# nothing about anyone that memory should keep ("Nice to meet you Alice.",
# "Pixel sounds lovely.", "I'm so happy for you!"), however many content
# words it has. Matched on the sentence lower-cased, after the interjections
# and names that open or close it ("Wow, ", ", Caroline!") are taken off.
_OPENER = re.compile(
    r"^(?:(?:(?i:oh+(?: (?:man|my|wow|no|gosh|dear))?|ah+|aw+|wow+|whoa|hey+|hi+|hello|yay+|"
    r"woo+hoo+|omg|gosh|geez|haha+|lol|yes+|yeah+|yep|ok|okay|well|so|hmm+|ooh+|ugh|thanks|"
    r"thank you|dear)|[A-Z][\w'’-]*)[,!.]+\s+)+"
)
_CLOSING_MARKS = " \t!.?,…:;)(-"
_VOCATIVE = re.compile(r"\s*(?:[A-Z][\w'’-]*|my friend|buddy|dude|mate|girl|man)")
_RATING = (
    r"(?:good|great|nice|cool|awesome|amazing|lovely|wonderful|beautiful|fantastic|fun|"
    r"incredible|interesting|exciting|perfect|neat|sweet|cute|adorable|gorgeous|stunning|"
    r"impressive|inspiring|brilliant|excellent|delicious|tasty|rad|epic|wild|crazy|insane|"
    r"scary|tough|hard|rough|sad|terrible|awful|horrible|special|magical|peaceful|relaxing|"
    r"fascinating|powerful|touching|heartwarming|fabulous|superb|terrific|splendid|intense|"
    r"challenging|stressful|blast|pleasure|shame|bummer|pity|relief|"
    r"exhausting|refreshing|rewarding|meaningful|valuable|important|tricky|difficult|overwhelming|"
    r"huge|breathtaking|brave|strong|talented|kind|thoughtful|generous|lucky|inspiration)"
)
_SMALL_TALK = re.compile(
    r"^(?:"
    # greetings and partings
    r"(?:it'?s |it is |it was |so |really |very |super |always )*"
    r"(?:nice|good|great|lovely|wonderful|a pleasure|pleasure|awesome|glad|happy) (?:to )?"
    r"(?:meet|see|hear from|hear|talk|chat|catch up|be back|connect)\b"
    r"|(?:long time no (?:see|talk|chat)|how are you|how have you been|how's it going|"
    r"take care|have a (?:great|good|nice|wonderful|lovely|fun) \w+|have fun|enjoy\b|cheers|"
    r"bye|see (?:you|ya)|talk (?:soon|later|to you)|catch you later|until next time)\b"
    # reactions to what the other said
    # what the other told: "Pixel sounds lovely." (a thing seen, "The studio looks
    # amazing.", is a description of it and stays; "That looks great!" does not)
    r"|(?:it |that |this )?sounds like\b|(?:i )?bet\b|(?:just )?(?:wanted to )?say(?:ing)? hi\b"
    r"|(?:take|have) a look|look at (?:this|that|these)|check (?:it|this|that|these|them) out"
    r"|(?!(?:my|our|i|we|i'm|i've|i'd)\b)(?:[\w'’-]+ ){0,2}"
    r"(?:sounds?|must be|must have been|must'?ve been)"
    r"(?: like)?(?: (?:so|really|very|pretty|super|such|quite|absolutely|totally|just|a|an|"
    r"truly|real|lots of|a lot of|like))* " + _RATING + r"\b(?: [\w'’-]+){0,3}$"
    r"|what (?:a|an)(?: (?:so|really|very|truly|such))* " + _RATING + r"\b(?: [\w'’-]+){0,4}$"
    # "It was amazing." said of one's own day describes it; "That's amazing!" reacts
    r"|(?:that|this|what|how|wow|it(?='s|’s| is|$))(?:'s|’s| is| was| looks| seems|"
    r" must be| must have been| must'?ve been)?"
    r"(?: (?:so|really|very|pretty|super|such|quite|absolutely|totally|just|a|an|truly|"
    r"real|one))* " + _RATING + r"\b(?: [\w'’-]+){0,2}$"
    r"|(?:i'?m |i am |we'?re |so |really |very |super |just )*"
    r"(?:glad|happy|sorry|thrilled|stoked|excited|proud|pleased|delighted)"
    r" (?:to hear|for (?:you|u)|you|that you|of you|about your|u)\b"
    # "It's inspiring to see your dedication.": about the other's news
    r"|(?:it'?s|it is|that'?s|that is) (?:so |really |very |such |just |truly |a )*" + _RATING
    + r" (?:to (?:see|hear|know)|that you|how you|you)\b"
    # compliments: "You're an inspiration to us all!", "Your courage is inspiring."
    r"|(?=[^ ]*(?: [^ ]*){0,11}$)(?:you'?re|you are|you'?ve|you both|you guys|you two|"
    r"your [\w'’-]+(?:'s| is| are| was| were))\b.*\b" + _RATING + r"\b"
    r"|(?:thanks|thank you|thx|ty)(?: (?:so|very) much)?(?: for| a lot| again|$)"
    r"|(?:congrats|congratulations|good luck|best of luck|well done|great job|good job|"
    r"nice job|nice work|great work|keep it up|keep up the|you got this|you've got this|"
    r"you'?re welcome|my pleasure|happy to help|glad (?:i could|to) help|any ?time|"
    r"feel free|let me know|hope (?:this|that) helps|i'?d be happy to|i would be happy to|"
    r"how can i help|can i help|i can help|i'?m here (?:for|to help)|i'?m always here|"
    r"(?:i )?hope (?:you|all|everything|things|your)\b|"
    r"you'?re doing (?:great|amazing|awesome|so well)|you deserve|you should be proud|"
    r"(?:i'?m )?proud of you|you'?ll do great|you can do it|that'?s what friends are for|"
    r"can'?t wait to hear|i'?d love to (?:see|hear) (?:it|them|more|that|those|your|you)\b|"
    r"tell me more|haha|lol)"
    # whole sentences only: "I see my therapist weekly." is a fact
    r"|(?:sure thing|of course|no worries|no problem|good point|fair enough|me too|same here|"
    r"i agree|totally agree|you'?re (?:so )?right|i see|i understand|i get it|i know|"
    r"makes sense|that makes sense|love (?:it|that|this)|you too|same to you|"
    r"(?:i'?m |we'?re )(?:so |really |very |super |just |truly )*(?:grateful|thankful|glad|"
    r"happy|excited|stoked|pumped|thrilled))(?: too)?$"
    r")"
)
# A bracketed tag of a few words on its own ("[Previous conversation summary]",
# "[image]"): markup around a turn, not something said. A longer bracket
# ("[shares a photo of a dog on a beach]") is kept like any sentence.
_MARKUP = re.compile(r"\[[^\W\d_][^\[\]]*\]")
_MARKUP_WORDS = 4
# "Sunflowers mean warmth, right?" states what it asks about: the tag goes,
# the statement stays.
_TAG_QUESTION = re.compile(
    r",\s*(?:right|isn'?t it|aren'?t they|wasn'?t it|don'?t you think|no|yeah|huh|eh|"
    r"correct|you know|don'?t you|didn'?t you|isn'?t that)\s*[?？]+$", re.IGNORECASE)
# "I went to a pottery class yesterday, have you ever tried it?": a statement
# followed by a question about it.
_CLAUSE_BREAK = re.compile(r"\s*(?:[,;]|\s[-–—])\s*")
_ASKS = re.compile(
    r"(?:but |and |so |or )?(?:have|has|had|do|does|did|are|is|was|were|can|could|would|will|"
    r"should|what|how|why|where|when|who|which|any|anything|wanna|want|ever|got)\b",
    re.IGNORECASE)
_QUESTION_WORD = re.compile(
    r"^(?:what|how|why|where|when|who|which|whose|do|does|did|are|is|was|were|can|could|"
    r"would|will|should|have|has|had|any|anything|wanna|guess)\b",
    re.IGNORECASE)

_REMEMBER = re.compile(r"^(?:\w+,\s*)?remember (?:when|that|the|how|our|my|your)\b",
                       re.IGNORECASE)


def useful_sentences(text: str) -> list[str]:
    """The sentences of ``text`` worth remembering, in order, each once.

    A sentence is kept when it states something (:func:`carries_a_fact`) and
    is not a question; a statement that ends in a question ("I tried
    pottery, have you?", "Blue means calm, right?") keeps its statement. A
    short bracketed tag on its own is markup and skipped; a tag opening a
    line goes, and what follows it is read. ``[^`` (a citation in the topic
    grammar) is written ``[ ^``, so a turn can never cite or break anything.
    """
    kept: dict[str, str] = {}
    for raw in _SENTENCE_END.split(text):
        sentence = " ".join(raw.split())
        if sentence.startswith("["):
            sentence = _without_markup(sentence)
        if not sentence or len(sentence) > _MAX_SENTENCE:
            continue
        if sentence.endswith(("?", "？")):
            sentence = _statement_in(sentence)
            if not sentence:
                continue
        if "[^" in sentence:
            sentence = sentence.replace("[^", "[ ^")
        if not carries_a_fact(sentence):
            continue
        if sentence[-1] not in ".!?。！？":
            sentence += "."
        kept.setdefault(_fact_key(sentence), sentence)
    return list(kept.values())


def _without_markup(sentence: str) -> str:
    """``sentence`` without the short bracketed tags that open it."""
    while (tag := _MARKUP.match(sentence)) is not None:
        if len(_WORD.findall(tag.group(0))) > _MARKUP_WORDS:
            break
        sentence = sentence[tag.end():].lstrip()
    return sentence


def _statement_in(question: str) -> str:
    """The statement a question carries ("" for a plain question)."""
    if _REMEMBER.match(question):
        return question  # "Remember that epic block in game 7?": shared memory
    tag = _TAG_QUESTION.search(question)
    if tag is not None:
        head = question[:tag.start()].rstrip()
    else:
        last = None
        for last in _CLAUSE_BREAK.finditer(question):
            pass
        if last is None or not _ASKS.match(question, last.end()) or not _WORD.search(
                question, 0, last.start()) or "," in question[last.end():]:
            return ""
        head = question[:last.start()]
    if _QUESTION_WORD.match(_OPENER.sub("", head)):
        return ""
    return head


def is_small_talk(sentence: str) -> bool:
    """Whether ``sentence`` is a greeting, a parting, thanks, or a reaction to the other side.

    "Nice to meet you Alice.", "Pixel sounds lovely.", "Wow, that's so cool,
    Caroline!", "I'm so happy for you!", "Thanks for sharing!", "Let me know
    if you need anything else." are; "I adopted a dog named Pixel." and "I
    am happy with my new job." are not. Either role's.
    """
    core = sentence.strip()
    opener = _OPENER.match(core)
    if opener is not None:
        core = core[opener.end():]
    core = core.rstrip(_CLOSING_MARKS)
    head, comma, tail = core.rpartition(",")
    if comma and _VOCATIVE.fullmatch(tail) is not None:
        core = head.rstrip(_CLOSING_MARKS)
    return _SMALL_TALK.match(core.lower().replace("’", "'")) is not None


def carries_a_fact(sentence: str) -> bool:
    """Whether ``sentence`` reads as a statement: three words, two of them content words.

    Roughly a subject, a verb and what it is about: "I prefer tea.",
    "I'm vegetarian." and "User likes tea." are kept; "Noted: tea.",
    "Biscuits too.", "Retry reply.", "Thank you so much!" and "do it" are
    not. A two-word fact ("Anna called.") is lost: two-word turns are far
    more often acknowledgements and fragments that mean nothing out of
    context. Small talk (:func:`is_small_talk`) is never a fact.
    """
    if _fact_key(sentence) in _PLEASANTRIES:
        return False
    words = content = 0
    for word in _WORD.findall(sentence.lower()):
        if word.isascii() or not _UNSPACED.search(word):
            words += 1
            content += word not in _FILLER
        else:
            weight = (len(_UNSPACED.findall(word)) + 1) // 2
            words += weight
            content += weight
        if words >= 3 and content >= 2:
            return not is_small_talk(sentence)
    return False


def subject_of(sentence: str) -> tuple[str, str]:
    """``(topic path, title)`` for ``sentence``."""
    for path, title, pattern in _SUBJECTS:
        if pattern.search(sentence):
            return path, title
    if _CORE_FACT.search(sentence) or _SELF_NAMED.fullmatch(sentence):
        return _CORE
    return _NOTES


@functools.lru_cache(maxsize=65536)
def _fact_key(sentence: str) -> str:
    """Same words, ignoring case, spacing, final stop and the day it was said."""
    sentence = CITATION.sub("", sentence)
    said = _SAID_ON.match(sentence)
    if said is not None:
        sentence = said.group(1) + ": " + sentence[said.end():]
    return " ".join(sentence.lower().split()).rstrip(".!?。！？ ")


# "Alice (8 May 2023): " opening a paragraph: the day is the first telling's,
# not part of the fact, so the same words said on another day are the same fact.
_SAID_ON = re.compile(r"^([^\n]*?) \(\d{1,2} [A-Z][a-z]+ \d{4}\): ")


def _draft_key(target: str) -> str | None:
    return handle_key(target) if is_source_handle(target) else None


def _day(record: SourceRecord) -> datetime.date | None:
    """The record's UTC date, or None when it has none the grammar can hold."""
    try:
        moment = datetime.datetime.fromtimestamp(record.timestamp, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    if record.timestamp <= 0 or moment.year < 1000:
        return None
    return moment.date()


def _when(record: SourceRecord) -> str:
    """The record's UTC date as a footnote time, or ``undated``."""
    day = _day(record)
    return "undated" if day is None else day.isoformat()


def speaker_name(record: SourceRecord) -> str:
    """Who said ``record``: the display name of its speaker field, else its role.

    Only the record's speaker field names the speaker (SPEC §6.1: the
    content is the speaker's, never evidence of who they are). The label
    ``Display (id)`` gives ``Display``; a turn without speaker fields is
    ``User`` or ``Assistant``. Characters that would read as topic syntax at
    the start of a paragraph or as a citation (``#``, ``[``, ``]``, ``^``) are
    left out.
    """
    label = record.speaker
    if record.speaker_id and label.endswith(f" ({record.speaker_id})"):
        label = label[: -len(record.speaker_id) - 3]
    name = " ".join(label.translate(_NAME_SYNTAX).split())
    if not name:
        name = record.role
    return name.capitalize() if name in ("user", "assistant") else name


_NAME_SYNTAX = str.maketrans({"#": " ", "[": " ", "]": " ", "^": " "})


def facts_of(record: SourceRecord) -> list[tuple[str, str]]:
    """``(sentence, paragraph text)`` for each fact ``record`` states.

    The paragraph says who said it, in their words, with relative dates
    resolved against the day they said it: ``Alice (8 May 2023): I went to
    a support group yesterday (7 May 2023).`` (:func:`speaker_name`,
    :func:`~memory.ledger.resolve_relative_dates`). An undated
    record is ``Alice: ...``, its relative dates as they are. ``sentence``
    is what the subject rules read.
    """
    name = speaker_name(record)
    day = _day(record)
    if day is None:
        return [(sentence, f"{name}: {sentence}") for sentence in useful_sentences(record.content)]
    said = f"{name} ({absolute_day(day)}): "
    return [(sentence, said + resolve_relative_dates(sentence, day))
            for sentence in useful_sentences(record.content)]


@dataclass
class _Draft:
    """One topic file being extended: its blocks, footnotes and fact index."""

    path: str
    blocks: list[Heading | Paragraph]
    footnotes: dict[str, Footnote]
    facts: dict[str, int]  # fact key -> index in blocks
    cites: dict[int, set[str]]  # block index -> source keys it cites (filled on demand)
    shared: set[str]  # footnote labels cited by more than one paragraph
    next_label: int = 1
    changed: bool = False

    @classmethod
    def open(cls, path: str, title: str, text: str | None) -> _Draft:
        topic = parse_topic(text, path) if text else Topic((Heading(1, title),), {})
        draft = cls(path, list(topic.blocks), dict(topic.footnotes), {}, {}, set())
        seen: set[str] = set()
        for index, block in enumerate(draft.blocks):
            if isinstance(block, Paragraph):
                draft.facts.setdefault(_fact_key(block.body), index)
                for label in block.citations:
                    if label in seen:
                        draft.shared.add(label)
                    seen.add(label)
        return draft

    def _cited_by(self, index: int) -> set[str]:
        cites = self.cites.get(index)
        if cites is None:
            block = self.blocks[index]
            assert isinstance(block, Paragraph)
            cites = self.cites[index] = {
                key
                for label in block.citations
                for link in self.footnotes[label].sources
                if (key := source_key(self.path, link.target)) is not None
                or (key := _draft_key(link.target)) is not None
            }
        return cites

    def add(self, sentence: str, record: SourceRecord) -> bool:
        """Cite ``record`` for ``sentence``; False when the fact's evidence is full."""
        handle = record.source_id
        key = handle_key(handle)
        index = self.facts.get(_fact_key(sentence))
        if index is not None:
            cited = self._cited_by(index)
            if key in cited:
                return True
            if len(cited) >= EVIDENCE_LIMIT:
                return False
        when = _when(record)
        link = SourceLink(handle, handle)
        if index is None:
            label = self._new_label()
            self.footnotes[label] = Footnote(label, when, (link,))
            self.facts[_fact_key(sentence)] = len(self.blocks)
            self.cites[len(self.blocks)] = {key}
            self.blocks.append(Paragraph(f"{sentence.rstrip()}[^{label}]", ()))
        else:
            old = self.blocks[index]
            assert isinstance(old, Paragraph)
            last = old.citations[-1]
            evidence = self.footnotes[last]
            if evidence.when == when and last not in self.shared:
                # Same day: one footnote lists every turn that said it.
                self.footnotes[last] = Footnote(last, when, (*evidence.sources, link))
            else:
                label = self._new_label()
                self.footnotes[label] = Footnote(label, when, (link,))
                self.blocks[index] = Paragraph(f"{old.body}[^{label}]", old.ids)
            self._cited_by(index).add(key)
        self.changed = True
        return True

    def log(self, records: Sequence[SourceRecord]) -> None:
        """Append one conversation-log unit citing ``records``, one footnote per date."""
        days: dict[str, list[SourceLink]] = {}
        for record in records:
            handle = record.source_id
            days.setdefault(_when(record), []).append(SourceLink(handle, handle))
        labels = []
        for when, links in days.items():
            label = self._new_label()
            self.footnotes[label] = Footnote(label, when, tuple(links))
            labels.append(f"[^{label}]")
        self.blocks.append(Paragraph(_log_line(list(days), len(records)) + "".join(labels), ()))
        self.changed = True

    def _new_label(self) -> str:
        label = f"e{self.next_label}"
        self.next_label += 1
        return label

    def edit(self) -> TopicEdit:
        return TopicEdit(self.path, render_topic(Topic(tuple(self.blocks), self.footnotes)))


SHARD_LIMIT = 400
"""Paragraphs per topic file before a subject continues in ``<subject>-<n>.md``.

Edits replace whole files, so a file's size is the cost of every batch that
touches it; bounded shards keep a batch's cost independent of how much memory
has accumulated."""

SHARD_BYTES = 64 * 1024
"""A topic file this large is full too, whatever its paragraph count (log units
cite a whole batch each, so they are long)."""

EVIDENCE_LIMIT = 16
"""Sources one fact's paragraph cites at most; see the module docstring."""


class _FactIndex:
    """Fact keys per topic file, recomputed only when a file's text changes."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[str, frozenset[str], int]] = {}
        self._cites: dict[str, tuple[str, frozenset[str]]] = {}

    def facts(self, path: str, text: str) -> tuple[frozenset[str], int] | None:
        """The file's fact keys and how full it is (paragraphs, or a full shard's count)."""
        cached = self._files.get(path)
        if cached is not None and cached[0] == text:
            return cached[1], cached[2]
        try:
            topic = parse_topic(text, path)
        except TopicError:
            return None  # a broken file is left to an operator, never rewritten
        paragraphs = topic.paragraphs
        keys = frozenset(_fact_key(paragraph.body) for paragraph in paragraphs)
        full = len(text.encode("utf-8")) >= SHARD_BYTES  # once per new text: cached below
        fill = SHARD_LIMIT if full else len(paragraphs)
        self._files[path] = (text, keys, fill)
        return keys, fill

    def cited(self, path: str, text: str) -> frozenset[str]:
        """The source keys ``text`` cites (empty for a file that does not parse)."""
        cached = self._cites.get(path)
        if cached is not None and cached[0] == text:
            return cached[1]
        try:
            topic = parse_topic(text, path)
        except TopicError:
            return frozenset()
        keys = frozenset(
            key for footnote in topic.footnotes.values() for link in footnote.sources
            if (key := source_key(path, link.target)) is not None
        )
        self._cites[path] = (text, keys)
        return keys


@dataclass
class _Subject:
    """The shards of one subject and where each known fact lives."""

    path: str
    title: str
    shards: list[str]
    sizes: dict[str, int]
    home: dict[str, str]  # fact key -> shard path
    broken: set[str]

    def place(self) -> str:
        """The shard a new paragraph goes to: the last one, or a new one once it is full."""
        shard = self.shards[-1] if self.shards else _shard_path(self.path, 1)
        if self.sizes.get(shard, 0) >= SHARD_LIMIT:  # a broken shard counts as full
            shard = _shard_path(self.path, len(self.shards) + 1)
        if shard not in self.sizes:
            self.shards.append(shard)
            self.sizes[shard] = 0
        self.sizes[shard] += 1
        return shard

    def title_of(self, shard: str) -> str:
        return self.title if shard == self.path else f"{self.title} ({shard[7:-3]})"


def _shard_path(subject: str, number: int) -> str:
    return subject if number == 1 else f"{subject[:-3]}-{number}.md"


def _log_line(days: list[str], turns: int) -> str:
    """``Conversation on 2026-11-30: nothing new to keep (3 turns).`` for a batch's chatter."""
    dated = sorted(day for day in days if day != "undated")
    if not dated:
        when = " (undated)"
    elif dated[0] == dated[-1]:
        when = f" on {dated[0]}"
    else:
        when = f" from {dated[0]} to {dated[-1]}"
    return f"Conversation{when}: nothing new to keep ({turns} turn{'' if turns == 1 else 's'})."


def extract_edits(
    records: Sequence[SourceRecord], workspace: WorkspaceSnapshot,
    index: _FactIndex | None = None,
) -> list[TopicEdit]:
    """The edits for ``records`` on ``workspace``: pure, deterministic.

    Every trusted record ends up cited: by the paragraph of each fact it
    states, or, when it states none, by one conversation-log unit per batch
    in :data:`CONVERSATIONS`. A file that does not parse is left to an
    operator, never rewritten: facts it holds are filed again in a new shard. A record
    already cited where it would go adds nothing, so a batch written twice
    gives no edits the second time.
    """
    index = index if index is not None else _FactIndex()
    present = set(workspace.topic_paths)
    subjects: dict[str, _Subject] = {}
    drafts: dict[str, _Draft] = {}

    def subject(path: str, title: str) -> _Subject:
        found = subjects.get(path)
        if found is None:
            found = subjects[path] = _open_subject(path, title, workspace, present, index)
        return found

    def draft_of(known: _Subject, shard: str) -> _Draft:
        draft = drafts.get(shard)
        if draft is None:
            draft = drafts[shard] = _open_draft(known, shard, workspace, present)
        return draft

    chatter: dict[str, SourceRecord] = {}
    for record in records:
        if not record.trusted:
            continue  # pending evidence is archived, never cited
        cited = False
        for sentence, fact in facts_of(record):
            known = subject(*subject_of(sentence))
            key = _fact_key(fact)
            shard = known.home.get(key)
            if shard is None:
                # Never a broken shard: it counts as full, and facts are only
                # ever homed in shards that parse.
                shard = known.home[key] = known.place()
            cited = draft_of(known, shard).add(fact, record) or cited
        if not cited:
            chatter.setdefault(record.source_id, record)
    edits = [drafts[path].edit() for path in drafts if drafts[path].changed]
    edits += log_nothing_new(list(chatter.values()), workspace, index)
    return sorted(edits, key=lambda edit: edit.path)


def log_nothing_new(
    records: Sequence[SourceRecord], workspace: WorkspaceSnapshot,
    index: _FactIndex | None = None,
) -> list[TopicEdit]:
    """The edit logging ``records`` as one "nothing new to keep" unit in :data:`CONVERSATIONS`.

    A batch is marked only when its commit changes memory (SPEC §6.4), so a
    writer that finds nothing worth keeping in some turns still has to cite
    them, or their batch stays owed and blocks its branch. The unit cites
    every trusted record that no conversation-log unit cites yet; none
    left gives no edit (a re-delivered batch changes nothing). Pure and
    blocking (it reads the snapshot): the extractive writer's chatter and a
    model's empty answer both end here.
    """
    index = index if index is not None else _FactIndex()
    fresh_by_handle = {record.source_id: record for record in records if record.trusted}
    if not fresh_by_handle:
        return []
    present = set(workspace.topic_paths)
    log = _open_subject(*_CONVERSATIONS, workspace, present, index)
    logged = frozenset[str]().union(*(
        index.cited(shard, workspace.read(shard))
        for shard in log.shards if shard not in log.broken
    ))
    fresh = [record for handle, record in fresh_by_handle.items()
             if handle_key(handle) not in logged]
    if not fresh:
        return []
    shard = log.place()
    draft = _open_draft(log, shard, workspace, present)
    draft.log(fresh)
    return [draft.edit()]


def _open_subject(
    path: str, title: str, workspace: WorkspaceSnapshot, present: set[str], index: _FactIndex,
) -> _Subject:
    """A subject's shards on ``workspace``: how full each is and where each fact lives."""
    found = _Subject(path, title, [], {}, {}, set())
    number = 1
    while (shard := _shard_path(path, number)) in present:
        found.shards.append(shard)
        try:
            facts = index.facts(shard, workspace.read(shard))
        except TopicError:  # not UTF-8, or a link: routed around like a broken file
            facts = None
        if facts is None:
            found.broken.add(shard)
            found.sizes[shard] = SHARD_LIMIT
        else:
            found.sizes[shard] = facts[1]
            for key in facts[0]:
                found.home.setdefault(key, shard)
        number += 1
    return found


def _open_draft(
    known: _Subject, shard: str, workspace: WorkspaceSnapshot, present: set[str],
) -> _Draft:
    text = workspace.read(shard) if shard in present else None
    return _Draft.open(shard, known.title_of(shard), text)


# A worker process's fact indexes, one per workspace (see extract_in_worker). A cache
# whose entries are checked against the text read, so a fallback run in a thread of the
# runtime's own process may share it.
_WORKER_INDEXES: dict[str, _FactIndex] = {}


def extract_in_worker(
    memory_dir: str, revision: str, topic_paths: tuple[str, ...],
    records: tuple[SourceRecord, ...],
) -> list[tuple[str, str | None]]:
    """:func:`extract_edits` on the snapshot of ``memory_dir`` at ``revision``, as ``(path, text)``.

    What a worker process runs (:class:`~memory.writers._offload.CpuWorker`):
    the snapshot's files are read here, through the same :class:`TopicReader`,
    and the process keeps its own fact index, so each batch parses only the
    files it changes, as in the writer's thread.
    """
    index = _WORKER_INDEXES.setdefault(memory_dir, _FactIndex())
    view = WorkspaceSnapshot(revision, topic_paths, TopicReader(memory_dir))
    return [(edit.path, edit.text) for edit in extract_edits(records, view, index)]


class ExtractiveWriter:
    """The default :class:`~memory.writers._writer.Writer`: no model, no network, deterministic.

    It remembers which facts each topic file holds (keyed by the file's text),
    so a batch parses only the files it changes.

    A large batch costs a good fraction of a second of CPU, and the
    snapshot's ``read`` opens files: on the event loop's thread that would
    stall every timer and message of the process (SPEC §2). So each call is
    one worker-thread hop: the extraction and all of its snapshot reads run
    there, on the call's own records (a tuple) and the read-only snapshot. A
    cancelled call (a writer timeout, a runtime closing) abandons its thread
    at once; the thread only computes edits, so dropping its result changes
    nothing. The one state it mutates, the fact index, is held exclusively by
    a lock for the whole extraction, so an abandoned thread that still runs
    and the next call's thread never touch it at the same time, and the loop
    never reads it.

    A thread still holds the interpreter lock. When the snapshot offers a
    ``run_cpu`` and reads its files through a :class:`TopicReader` (the
    runtime's snapshots), the extraction runs there instead, in a worker
    process (:func:`extract_in_worker`, same edits); the thread only waits.
    """

    exclusive = True  # cheap and local: one batch at a time beats redoing work on conflicts

    def __init__(self) -> None:
        self._index = _FactIndex()
        self._index_lock = threading.Lock()

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        return await self._extract(batch.records, workspace)

    async def write_group(
        self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
    ) -> list[TopicEdit]:
        """Every batch's records at once: each record is cited as if written alone.

        Chatter of the group shares one log unit (a unit per call, as in
        :meth:`write`).
        """
        return await self._extract(tuple(r for batch in batches for r in batch.records),
                                   workspace)

    async def _extract(
        self, records: tuple[SourceRecord, ...], workspace: WorkspaceSnapshot
    ) -> list[TopicEdit]:
        # The write lane (store.lowlevel.write_lane): extraction never holds an append's thread.
        return await anyio.to_thread.run_sync(
            self._extract_locked, records, workspace, abandon_on_cancel=True,
            limiter=write_lane())

    def _extract_locked(
        self, records: tuple[SourceRecord, ...], workspace: WorkspaceSnapshot
    ) -> list[TopicEdit]:
        if workspace.run_cpu is not None and isinstance(workspace.read, TopicReader):
            found = workspace.run_cpu(extract_in_worker, workspace.read.memory_dir,
                                      workspace.revision, tuple(workspace.topic_paths), records)
            return [TopicEdit(path, text) for path, text in found]
        with self._index_lock:
            return extract_edits(records, workspace, self._index)
