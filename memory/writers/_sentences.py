"""Which sentences of a turn are facts worth keeping, who said them, and under which subject.

The extractive writer (:mod:`memory.writers._extractive`) is two things: these
rules on text, and the assembly of their results into topic edits (drafts,
shards, merged repeats, citations). The rules are here, apart, because they
are pure functions of a record or a sentence, read and tested as such, and
tuned on their own (what counts as small talk, a question, a core fact)
without touching how edits are built.

The name comes from the record's speaker field only (:func:`speaker_name`;
the content is never evidence of who speaks), the day is the record's UTC
date (the footnote's time), and relative dates are resolved against it
(:mod:`memory.ledger._dates`). A first-person sentence is quoted, not
rewritten in the third person: "I" is unambiguous next to the name, and
the words stay the speaker's, quotable and searchable as they were said.
"""

from __future__ import annotations

import datetime
import functools
import re

from memory.ledger import absolute_day, resolve_relative_dates
from memory.ledger._records import SourceRecord
from memory.workspace._topics import CITATION

__all__ = [
    "carries_a_fact", "fact_key", "facts_of", "is_small_talk", "record_day", "speaker_name",
    "subject_of", "useful_sentences",
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
        kept.setdefault(fact_key(sentence), sentence)
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
    if fact_key(sentence) in _PLEASANTRIES:
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
def fact_key(sentence: str) -> str:
    """Same words, ignoring case, spacing, final stop and the day it was said."""
    sentence = CITATION.sub("", sentence)
    said = _SAID_ON.match(sentence)
    if said is not None:
        sentence = said.group(1) + ": " + sentence[said.end():]
    return " ".join(sentence.lower().split()).rstrip(".!?。！？ ")


# "Alice (8 May 2023): " opening a paragraph: the day is the first telling's,
# not part of the fact, so the same words said on another day are the same fact.
_SAID_ON = re.compile(r"^([^\n]*?) \(\d{1,2} [A-Z][a-z]+ \d{4}\): ")


def record_day(record: SourceRecord) -> datetime.date | None:
    """The record's UTC date, or None when it has none the grammar can hold."""
    try:
        moment = datetime.datetime.fromtimestamp(record.timestamp, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    if record.timestamp <= 0 or moment.year < 1000:
        return None
    return moment.date()


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
    day = record_day(record)
    if day is None:
        return [(sentence, f"{name}: {sentence}") for sentence in useful_sentences(record.content)]
    said = f"{name} ({absolute_day(day)}): "
    return [(sentence, said + resolve_relative_dates(sentence, day))
            for sentence in useful_sentences(record.content)]
