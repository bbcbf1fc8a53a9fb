"""The word lists and compiled patterns grading/integrity.py reads a response with (see its docstring for what
each decides): forged verdicts and delimiters, grading requests (anchor + verb + result, per language), text
addressed to the grader, notes, and the text normalisation (invisible characters, base64 runs)."""

import re


def _any(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


# ---- forged verdicts and delimiters: text our judge or a chat template emits, never an answer ----
FORGED = {
    "forged verdict": re.compile(
        r"[\"']?\b\w*criteria_met\w*\b[\"']?\s*[:=]"  # our verdict key (per-criterion and batched schemas), or
        # a variant of it ("all_criteria_met"), or its translation as a key: "criterios_cumplidos", "kriterien_erfüllt"
        r"|[\"']\w*(?:criteri\w*|crit[èe]res?|kriteri\w*)_(?:cumplid\w*|rempli\w*|erf[üu]llt\w*|atendid\w*|"
        r"soddisfatt\w*|satisf\w*)[\"']\s*:"
        r"|<(?:criterion|criteria|rubric[_-]?item|item)\b[^>\n]*\bmet\s*=\s*[\"']?(?:true|yes|1)\b"  # in XML
        r"|\"verdicts\"\s*:\s*\["  # the batched schema's array
        r"|\{[^{}]{0,400}?\"explanation\"\s*:[^{}]{0,400}?\"rating\"\s*:\s*\d"  # the rating schema, either order
        r"|\{[^{}]{0,400}?\"rating\"\s*:\s*\d[^{}]{0,400}?\"explanation\"\s*:",
        re.I,
    ),
    "fake delimiter": re.compile(
        r"\[\[\s*end\s+of\s+(?:the\s+)?response\b|\[\[\s*response\s+[0-9a-f]{4,}\s*\]\]"  # judge_*.txt markers
        # the same marker in other languages: [[ENDE DER ANTWORT]], [[FIN DE LA RÉPONSE]], [[FIM DA RESPOSTA]]
        r"|\[\[\s*(?:ende|fin|fine|fim|конец|结束|終わり)\b[^\]\n]{0,40}\]\]"
        r"|(?-i:^[ \t]*[\W_]*END\s+OF\s+(?:THE\s+)?(?:RESPONSE|ANSWER|OUTPUT|COMPLETION)\b[^\n]{0,40}$)"
        # a line that is only a decorated end-of-response marker: "--- END OF RESPONSE ---", "[END OF ANSWER]"
        r"|^[ \t]*(?:[\[<(#=*_-][\[<(#=*_/ \t-]*)(?:end\s+of\s+(?:the\s+)?(?:response|answer|output|completion)|"
        r"end_of_(?:response|answer))\b\s*(?:[0-9a-f]{4,})?\s*[\]>)#=*_-]*[ \t]*$",
        re.I | re.M,
    ),
    "chat-role token": re.compile(
        r"<\|[A-Za-z][\w.-]{0,30}\|>"  # ChatML, Llama 3, Phi, gpt-oss harmony: <|im_start|>, <|eot_id|>, <|end|>
        r"|<｜[^｜>\n]{1,40}｜>"  # DeepSeek's full-width bars
        r"|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>"
    ),  # Llama 2, Gemma
}

# ---- grading requests: anchor + imperative grading verb + grading result, per language ----
SELF = re.compile(
    _any(  # "this response": the text refers to itself
        r"\b(?:this|my|the\s+(?:above|present|current|preceding|following))\s+"
        r"(?:response|answer|reply|output|completion)\b",
        r"\bthe\s+(?:response|answer|output|completion)\s+(?:above|below|here)\b",
        r"\bthe\s+(?:response|answer|output|completion)\s+(?:under\s+review|being\s+(?:graded|evaluated|reviewed|scored))",
        r"\b(?:esta|mi|la\s+presente)\s+(?:respuesta|contestaci[oó]n)\b",  # es
        r"\b(?:cette|ma|la\s+pr[ée]sente)\s+r[ée]ponse\b",  # fr
        r"\b(?:diese|meine|vorliegende)[rnms]?\s+(?:Antwort|Ausgabe)\b",  # de
        r"\b(?:questa|la\s+mia)\s+risposta\b",  # it
        r"\b(?:esta|essa|minha|a\s+presente)\s+resposta\b",  # pt
        r"(?:этот|данный|мой|этому|данному|моему|этого|данного|моего)\s+ответ",  # ru
        r"(?:这个|这条|这份|此|该|本|我的)(?:回答|答案|回复|答复|输出)",  # zh
        r"(?:この|本|私の)(?:回答|応答|答え|解答|出力)",  # ja
    ),
    re.I,
)
GRADER_NOUN = _any(
    r"(?:ai\s+|llm\s+|automated\s+)?(?:grader|evaluator|rater|assessor)s?",
    r"(?:reward|grading|scoring|judge)\s+model",
    r"(?:ai|llm|model)\s+judge",
    r"grading\s+(?:system|assistant|ai)",
    r"evaluador(?:a|es)?",
    r"calificador(?:a|es)?",
    r"évaluat(?:eur|rice)s?",
    r"correct(?:eur|rice)s?",
    r"Bewerter(?:in)?",
    r"Prüfer(?:in)?",
    r"Gutachter(?:in)?",
    r"valutatore",
    r"avaliador(?:a|es)?",
    r"оценщик\w*",
    r"проверяющ\w+",
    r"эксперт\w*",
    r"评分员",
    r"评分者",
    r"评估者",
    r"评审员",
    r"评分模型",
    r"评判模型",
    r"阅卷人",
    r"採点者",
    r"評価者",
    r"審査員",
    r"採点モデル",
    r"評価モデル",
)
GRADER = re.compile(
    _any(  # a grader addressed as such, not merely mentioned ("the grader will ...")
        r"\b(?:dear|attention|note\s+(?:to|for)|message\s+(?:to|for)|instructions?\s+(?:to|for)|hey|hello|hi|to)\s+"
        r"(?:the\s+|any\s+|all\s+|my\s+)?" + GRADER_NOUN + r"\b",
        r"\b(?:you|you're|you\s+are)\s+(?:as\s+)?(?:the|an?)\s+" + GRADER_NOUN + r"\b",
        r"\bas\s+(?:the|an?)\s+" + GRADER_NOUN + r",?\s+you\b",
        r"(?:^|[.!?。！？\n\[(])\s*" + GRADER_NOUN + r"\s*[:,：，]",  # "Grader: ...", "Evaluador, ...", "[grader: ..."
        r"\b" + GRADER_NOUN + r"'s\s+note\b",  # a note signed by the grader
        r"\b(?:attention|note\s+to|message\s+to|hey|hello|for)\s+(?:the\s+)?(?:\w+\s+)?judge\s*[:,—-]",  # not "Dear
        # Judge" (courts); "for the grader —"
        r"\bfor\s+the\s+" + GRADER_NOUN + r"\s*[:—-]",
        r"\b(?:estimad[oa]s?|querid[oa]s?|nota\s+(?:para|al|a\s+la)|atenci[oó]n|para\s+el|al)\s+(?:se[ñn]or\s+)?"
        r"(?:evaluador|calificador)",  # es
        r"\b(?:cher|chère|note\s+(?:à|pour)|à\s+l'attention\s+d[eu]s?|au|à\s+l')\s*(?:l')?(?:évaluat|correct)",  # fr
        r"\b(?:liebe[rs]?|sehr\s+geehrte[rs]?|(?:hinweis|anweisung|nachricht)\s+(?:an|für)|an\s+(?:den|die))\s+"
        r"(?:den\s+|die\s+)?(?:Bewerter|Prüfer|Gutachter)",
        r"\b(?:car[oa]|prezad[oa]|nota\s+para|instru[çc][ãa]o\s+para|aten[çc][ãa]o|ao|para\s+o)\s+(?:o\s+)?"
        r"(?:sr\.?\s+)?avaliador",  # pt
        r"(?:уважаем\w+|дорог\w+|примечание\s+для|для|внимание)\s*,?\s+(?:оценщик|проверяющ|эксперт)",  # ru
        r"(?:致|给|亲爱的|尊敬的|各位)(?:评分员|评分者|评估者|评审员|评分模型|阅卷人)",  # zh
        r"(?:採点者|評価者|審査員)(?:の方)?(?:へ|様|各位)",  # ja
    ),
    re.I | re.M,
)
OVERRIDE = re.compile(
    _any(
        r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+|my\s+)?"
        r"(?:previous|prior|above|earlier|preceding|system|original|other|grading)\s+"
        r"(?:instructions?|prompts?|rules?|guidelines?|criteria|rubric|messages?)\b",
        r"\b(?:ignor[ae]|olvid[ae])\s+(?:todas\s+)?las\s+instrucciones\b",  # es
        r"\b(?:ignore[zr]?|oublie[zr]?)\s+(?:toutes\s+)?les\s+(?:instructions|consignes)\b",  # fr
        r"\b(?:ignoriere|ignorieren\s+Sie|vergiss|vergessen\s+Sie)\s+(?:alle\s+)?(?:vorherigen\s+|bisherigen\s+)?"
        r"(?:Anweisungen|Instruktionen|Regeln)\b",  # de
        r"\b(?:ignora|dimentica)\s+(?:tutte\s+)?le\s+istruzioni\b",  # it
        r"\b(?:ignore|ignora|esque[çc]a)\s+(?:todas\s+)?as\s+instru[çc][õo]es\b",  # pt
        r"(?:игнорируй|игнорируйте|забудь|забудьте)\s+(?:все\s+)?(?:предыдущие\s+|прежние\s+)?(?:инструкции|указания)",
        r"(?:忽略|无视|忘记|忘掉)(?:之前|以上|上述|前面|所有|全部)?的?(?:所有)?(?:指令|指示|说明|规则)",  # zh
        r"(?:以前の|前の|上記の|これまでの|すべての)?(?:指示|命令|指令)を(?:すべて)?(?:無視|忘れ)",  # ja
    ),
    re.I,
)
CLAUSE_START = (  # where an imperative stands: a clause's start, after "please", or after a modal aimed at "you"
    r"(?:^|[.!?:;,，：]\s*|\b(?:please|kindly|and|so|just|simply|then|now|therefore|thus|por\s+favor|favor|"
    r"s'il\s+vous\s+pla[iî]t|bitte|per\s+favore|y|e|et|und)\s+|пожалуйста,?\s+"
    r"|\b(?:you|we)\s+(?:should|must|need\s+to|have\s+to|are\s+to|can|will)\s+"
    r"|\b(?:ask|request|instruct|urge|want)\s+you\s+to\s+|\b(?:be|make)\s+sure\s+to\s+)"
)
VERB = re.compile(
    _any(  # a grading instruction's verb: imperative, requested or "should be"
        # forms that are also indicative ("considera", "ich bewerte", "give") count only where an imperative stands
        CLAUSE_START
        + _any(
            r"mark|rate|grade|score|consider|treat|count|evaluate|assess|judge|award|give|assign|return|output|record",
            r"set|label|deem|credit|classify",
            r"marca|califica|punt[úu]a|otorga|asigna|considera|eval[úu]a|dale|trata",  # es
            r"avalia|atribui|d[áa]|pontua|classifica",  # pt
            r"attribue|consid[èe]re|accorde|mets|donne|note|marque|[ée]value",  # fr
            r"bewerte|gib|vergib|markiere|betrachte|werte|setze|z[äa]hle",  # de
            r"assegna|assegnate|dai|date|valuta|valutate|considerate|segna|segnate",  # it
        )
        + r"\b",
        r"\b(?:request|ask\s+for|demand)\b",
        r"\b(?:should|must|needs?\s+to|ought\s+to|is\s+to|has\s+to)\s+be\s+(?:marked|rated|graded|scored|considered|"
        r"treated|counted|evaluated|judged|assessed|deemed|given|awarded|credited|classified)\b",
        # forms that are only imperative (formal or plural), anywhere in the sentence
        r"\b(?:marque|califique|punt[úu]e|otorgue|asigne|considere|eval[úu]e|d[ée]le|denle|dadle|d[ée]nle)\b",  # es
        r"\b(?:atribua|avalie|conceda|classifique|pontue|d[êé]|d[êé]-lhe)\b",  # pt (marque, considere: as es)
        r"\b(?:donnez|attribuez|notez|marquez|consid[ée]rez|[ée]valuez|accordez|mettez)\b",  # fr
        r"\b(?:bewerten|geben|vergeben|markieren|betrachten|werten|z[äa]hlen|setzen|erteilen)\s+Sie\b",  # de
        r"\b(?:assegni|dia|valuti|consideri|segni)\b",  # it
        r"(?:поставьте|поставь|оцените|оцени|отметьте|отметь|засчитайте|засчитай|считайте|считай|дайте|дай|"
        r"присвойте|присвой|выставьте|выставь|признайте|признай)",  # ru
        r"(?:请|給|给予|给出|打出?|评为|判定为?|标记为|视为|认定为|判为|算作)",  # zh
        r"(?:ください|下さい|してほしい|とみなして|として評価|を付け|をつけ|を与え)",  # ja
    ),
    re.I | re.M,
)
RESULT = re.compile(
    _any(  # what a grading instruction asks for: a top grade, or criteria counted as met
        r"\bfull\s+(?:marks?|score|points|credit)\b",
        r"\bperfect\s+(?:score|rating|grade|marks?)\b",
        r"\b(?:maximum|max|highest|top)\s+(?:possible\s+)?(?:score|rating|grade|marks?|points)\b",
        r"\b10\s*/\s*10\b",
        r"\b10\s+out\s+of\s+10\b",
        r"\b100\s*/\s*100\b",
        r"\bas\s+(?:met|satisfied|fulfilled|passing|passed|correct)\b",
        r"\bas\s+meeting\s+(?:all|every|each|the)\s+(?:of\s+)?(?:the\s+)?(?:rubric\s+)?(?:criteria|criterion|requirements)",
        r"\bcriteri(?:a|on)\s+(?:as\s+)?(?:met|satisfied|fulfilled|true|passed)\b",
        r"\b(?:puntuaci[oó]n|calificaci[oó]n|nota)\s+(?:m[aá]xima|perfecta|completa)\b",
        r"\bm[aá]xima\s+puntuaci[oó]n\b",
        r"\bcomo\s+(?:cumplid[oa]s?|satisfech[oa]s?)\b",  # es
        r"\b(?:note|score)\s+(?:maximale|parfaite)\b",
        r"\bcomme\s+(?:satisfaits?|remplis?)\b",  # fr
        r"\b(?:voll|maximal)\w*\s+Punktzahl\b",
        r"\bH[öo]chstpunktzahl\b",
        r"\bBestnote\b",
        r"\bvoll\w*\s+Punkte\b",
        r"\bals\s+erf[üu]llt\b",  # de
        r"\b(?:punteggio|voto)\s+(?:massimo|pieno|perfetto)\b",
        r"\bcome\s+soddisfatt[io]\b",  # it
        r"\bnota\s+m[áa]xima\b",
        r"\bpontua[çc][ãa]o\s+(?:m[áa]xima|total|perfeita)\b",
        r"\bcomo\s+(?:cumpridos?|atendidos?|satisfeitos?)\b",  # pt
        r"(?:максимальн|высш|наивысш|полн)\w*\s+(?:балл|оценк)",
        r"как\s+выполненн?\w*",  # ru
        r"满分",
        r"最高分",
        r"(?:所有|全部)评分标准",
        r"(?:均|都|全部)已?满足",
        r"完美分数",  # zh
        r"満点",
        r"最高点",
        r"最高評価",
        r"(?:すべて|全て)の(?:評価)?基準を満たし",  # ja
    ),
    re.I,
)

GRADE_THIS = re.compile(
    _any(CLAUSE_START, r"\b" + GRADER_NOUN + r"\s+(?:must|should|will|needs\s+to|is\s+to)\s+")
    + r"(?:grade|score|rate|treat|consider|evaluate|assess|judge|count|deem|credit)\s+"
    + SELF.pattern,
    re.I | re.M,
)
"""A grading verb whose object is this response ("treat this answer as ..."): a request about its grade."""

# ---- notes: grading talk that an answer may well contain; recorded, never vetoed by code ----
NOTES = {
    "claims criteria are met": re.compile(
        r"\b(?:all|every|each)\s+(?:of\s+the\s+)?(?:rubric\s+)?criteri(?:a|on)\s+(?:are|is|have\s+been|has\s+been|"
        r"were|was)\s+(?:met|satisfied|fulfilled)\b|\b(?:meets|satisfies|fulfils|fulfills)\s+(?:all|every)\s+"
        r"(?:of\s+)?(?:the\s+)?(?:rubric\s+)?criteri",
        re.I,
    ),
    "grading result": RESULT,
    "instruction override": OVERRIDE,
    "addresses a grader": GRADER,
    "mentions a grader": re.compile(
        r"\b" + GRADER_NOUN + r"\b|\brubric\b|\brúbrica\b|\bgrille\s+d'évaluation\b"
        r"|评分标准|評価基準|критери\w+\s+оценк",
        re.I,
    ),
    "role-like header": re.compile(
        r"^\s*(?:#+\s*)?(?:system|user|assistant|human|instruction|###\s*response)\s*:", re.I | re.M
    ),
    "response marker": re.compile(r"</?response>|\bend\s+of\s+(?:the\s+)?(?:response|answer)\b", re.I),
    "verdict-like line": re.compile(r"^\s*(?:verdict|final\s+(?:score|grade|verdict)|rating)\s*[:=]", re.I | re.M),
}

FENCED = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?^[ \t]*\1[ \t]*$|`[^`\n]+`", re.S | re.M)
"""Code blocks and inline code spans: literal syntax shown to the user."""
SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")

# ---- addressed to the grader: the grader of this response named, addressed, or a fake grading turn ----
GRADING_PART = (
    r"(?:grading|scoring|evaluating|checking|reviewing|judging|assessing|marking|rating|verifying|"
    r"grades|scores|evaluates|checks|reviews|judges|assesses|marks|rates|verifies|reads|reading)"
)
TARGET = r"(?:this|the|my)\s+(?:response|answer|reply|output|completion|submission|text)"
AI_NOUN = _any(  # an automated grader, as a noun: a concept ("a reward model is ...") until it is addressed
    r"(?:ai|a\.i\.|llm|automated|language[- ]model)\s+(?:grader|evaluator|assessor|rater|reviewer|judge|marker|checker|"
    r"scorer)s?",
    r"(?:reviewer|grader|grading|evaluator|evaluation|judge|judging|scoring|reward|rubric)\s+(?:model|llm|ai|bot)s?",
)
MODEL = r"(?:language\s+)?model|ai|llm"  # addressed only where nothing else is: "Dear model,", not "for the model"
AI_GRADER = re.compile(
    _any(  # the grader of this response, and nobody else: an AI grader addressed, or "whoever grades this"
        r"\b(?:to|for|dear|attention|note\s+(?:to|for)|message\s+(?:to|for)|instructions?\s+(?:to|for)|hey|hello|hi)\s+"
        r"(?:the\s+|any\s+|all\s+|my\s+|our\s+)?" + AI_NOUN + r"\b(?!\s+(?:of|for|in|to|that|which|is|was|can|will)\b)",
        r"\b(?:dear|attention|note\s+(?:to|for)|message\s+(?:to|for)|instructions?\s+(?:to|for)|hey|hello)\s+"
        r"(?:the\s+)?(?:" + MODEL + r")\s*[:,]",
        r"(?:^|[.!?。！？\n\[(])\s*" + AI_NOUN + r"\s*[:,：，]",  # "AI assessor, ...", "Reward model: ..."
        r"\b(?:ai|llm|language\s+model|model|assistant|bot|system)\s+(?:that\s+|who\s+|which\s+)?(?:is\s+|are\s+)?"
        r"(?:now\s+)?" + GRADING_PART + r"\s+" + TARGET,
        r"\b(?:whoever|whichever|anyone|anybody|whatever)\s+(?:\w+\s+)?(?:is\s+)?"
        + GRADING_PART
        + r"\s+(?:"
        + TARGET
        + r"|this)\b",
        r"\bif\s+you\s+are\s+(?:the|an?)\s+\w+(?:\s+\w+)?\s+" + GRADING_PART + r"\s+" + TARGET,
        r"\bquien(?:quiera\s+que)?\s+(?:eval[úu]e|califique|revise|corrija)\s+(?:esta|la)\s+respuesta",  # es
        r"\b(?:la\s+)?(?:ia|modelo)\s+que\s+(?:eval[úu]a|califica|revisa|corrige)\s+(?:esta|la)\s+respuesta",
        r"\bquiconque\s+(?:[ée]value|note|corrige|lit)\s+cette\s+r[ée]ponse",  # fr
        r"\b(?:l'ia|le\s+mod[èe]le)\s+qui\s+(?:[ée]value|note|corrige)\s+cette\s+r[ée]ponse",
        r"\b(?:an|für)\s+(?:das|den|die)\s+(?:bewertende|prüfende|korrigierende)[snmr]?\s+(?:KI|KI-Modell|Modell|"
        r"Sprachmodell|System)",  # de
        r"\b(?:KI|Modell|Sprachmodell),?\s+(?:das|die|der)\s+diese\s+Antwort\s+(?:bewertet|prüft|korrigiert)",
        r"\bwer\s+(?:auch\s+immer\s+)?diese\s+Antwort\s+(?:bewertet|prüft|korrigiert)",
        r"\b(?:quem(?:\s+quer\s+que)?)\s+(?:avalie|corrija|revise)\s+(?:esta|a)\s+resposta",  # pt
        r"\b(?:a\s+ia|o\s+modelo)\s+que\s+(?:avalia|corrige|revisa)\s+(?:esta|a)\s+resposta",
        r"\b(?:chiunque|chi)\s+(?:valuti|valuta|corregga|corregge|giudichi|giudica)\s+questa\s+risposta",  # it
        r"(?:модель|ии|нейросеть|система)\w*,?\s+(?:котор\w+)\s+(?:оценива|проверя)\w+\s+(?:этот|данный)\s+ответ",  # ru
        r"(?:致|给|对)(?:评分|评估|阅卷|判分|打分)的?(?:AI|模型|大模型|系统|助手)",  # zh
        r"(?:採点|評価)(?:する|を行う|用の)?(?:AI|モデル|システム)(?:へ|様)",  # ja
        r"(?:採点|評価)(?:ご)?担当(?:の方|者)(?:へ|様)",
    ),
    re.I | re.M,
)
RUBRIC_WORDS = re.compile(
    _any(  # what a grader of this response grades it by
        r"\bcriteri(?:a|on)\b",
        r"\brubric\b",
        r"\bchecklist\b",
        r"\bmarking\s+(?:sheet|scheme|guide)\b",
        r"\bscoring\s+(?:guide|sheet|scheme)\b",
        r"\brequirements?\b",
        r"\bverdicts?\b",
        r"\bitems?\b",
        r"\bcriterios?\b",
        r"\br[úu]brica\b",
        r"\bcrit[èe]res?\b",
        r"\bbar[èe]me\b",
        r"\bgrille\b",
        r"\bKriteri(?:um|en)\b",
        r"\bBewertungs\w+",
        r"\bcrit[ée]rios?\b",
        r"\bcriteri\b",
        r"критери\w*",
        r"评分标准",
        r"标准",
        r"ルーブリック",
        r"基準",
    ),
    re.I,
)
RESULT_WORDS = re.compile(
    _any(  # what such a text asks the grader for, or claims
        r"\b(?:met|satisfied|satisfies|fulfil+(?:ed|s)?|compliant|true|yes|pass(?:ed|es)?|covers?|correct|full|top|"
        r"maximum|perfect|mark|rate|score|grade|award|accordingly)\b",
        r"\bcumpl\w*",
        r"\bsatisf\w*",
        r"\bremplis?\b",
        r"\bconforme\b",
        r"\berf[üu]ll\w*",
        r"\batend\w*",
        r"\bsoddisf\w*",
        r"выполн\w*",
        r"满足",
        r"満たし",
        r"満点",
        r"满分",
    ),
    re.I,
)
MARKER = re.compile(  # a fake turn or grading section around the response (a tag or bracket, not a word in a sentence)
    r"</?(?:response|answer|grading[\w-]*|grader[\w-]*|evaluation|evaluator[\w-]*|judge[\w-]*|assessment|system|"
    r"developer)\s*>|\[/?(?:SYSTEM|DEVELOPER|GRADER|EVALUATOR|JUDGE)\]",
    re.I,
)

# ---- the text as a judge model reads it ----
INVISIBLE = re.compile(
    "[\u00ad\u180e\u200b\u200c\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\U000e0000-\U000e007f]"
)
"""Format characters a reader does not see (soft hyphens, zero-width spaces, bidi marks, tag characters); the
zero-width joiner of emoji sequences is kept."""
BASE64_RUN = re.compile(r"(?<![\w+/])[A-Za-z0-9+/]{40,}={0,2}(?![\w+/=])")
