//! BPE pre-tokenizers: how text is cut into words before merges run, chosen by the GGUF key
//! `tokenizer.ggml.pre`.
//!
//! Each pre-tokenizer is a list of [`Step`]s applied in order; a step splits every current
//! fragment into its matches and the gaps between them (both stay fragments), which is how
//! llama.cpp applies a list of regexes. The steps are hand-written matchers for exactly the
//! patterns the supported models use (GPT-2, LLaMA-3, Qwen2, Qwen3.5, digit and punctuation
//! splitters, DeepSeek's class splitters), with the same leftmost-greedy semantics as the
//! ECMAScript regexes they stand for: `\p{..}` classes follow Unicode 15.1 categories, `\s`
//! is White_Space. Hand-written matchers keep pre-tokenization exact, allocation-light and
//! free of a regex engine.

use super::unicode::Flags;

/// A character class used by the generic steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `\p{N}`
    Number,
    /// `\p{L}`
    Letter,
    /// `\p{P}`
    Punct,
    /// `[\r\n]`
    CrLf,
    /// `[\p{P}\$\+<=>\^~\|]` (llama.cpp's default BPE pre-tokenizer)
    PunctDefault,
    /// `[\p{P}\$\+<=>\^~\|`]` (Falcon)
    PunctFalcon,
    /// `[一-龥ࠀ-一가-퟿]` (DeepSeek; the first two ranges join into U+0800..U+9FA5)
    DeepseekCjk,
    /// DeepSeek-LLM's letter class (Latin, Greek, Cyrillic, ... cased letters).
    DeepseekLatin,
    /// `[!-/:-~！-／：-～‘-‟　-。]` (DeepSeek-LLM)
    DeepseekPunct,
    /// `[^(\s|.,!?…。，、।۔،)]` (BLOOM, Poro, Viking)
    BloomWord,
}

/// DeepSeek-LLM's letter ranges, as written in its tokenizer's split regex.
const DEEPSEEK_LATIN: [(u32, u32); 87] = [
    (0x41, 0x5A),
    (0x61, 0x7A),
    (0xB5, 0xB5),
    (0xC0, 0xD6),
    (0xD8, 0xF6),
    (0xF8, 0x1BA),
    (0x1BC, 0x1BF),
    (0x1C4, 0x293),
    (0x295, 0x2AF),
    (0x370, 0x373),
    (0x376, 0x376),
    (0x377, 0x377),
    (0x37B, 0x37D),
    (0x37F, 0x37F),
    (0x386, 0x386),
    (0x388, 0x38A),
    (0x38C, 0x38C),
    (0x38E, 0x3A1),
    (0x3A3, 0x3F5),
    (0x3F7, 0x481),
    (0x48A, 0x52F),
    (0x531, 0x556),
    (0x10A0, 0x10C5),
    (0x13A0, 0x13F5),
    (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF),
    (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57),
    (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D),
    (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3),
    (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC),
    (0x2102, 0x2102),
    (0x2107, 0x2107),
    (0x210A, 0x2113),
    (0x2115, 0x2115),
    (0x2119, 0x211D),
    (0x2124, 0x2124),
    (0x2126, 0x2126),
    (0x2128, 0x2128),
    (0x212A, 0x212D),
    (0x212F, 0x2134),
    (0x2139, 0x2139),
    (0x213C, 0x213F),
    (0x2145, 0x2149),
    (0x214E, 0x214E),
    (0x2183, 0x2183),
    (0x2184, 0x2184),
    (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF2),
    (0x2CF3, 0x2CF3),
    (0xA640, 0xA66D),
    (0xA680, 0xA69B),
    (0xA722, 0xA76F),
    (0xA771, 0xA787),
    (0xA78B, 0xA78E),
    (0xAB70, 0xABBF),
    (0xFB00, 0xFB06),
    (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A),
    (0x10400, 0x1044F),
    (0x104B0, 0x104D3),
    (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2),
    (0x10CC0, 0x10CF2),
    (0x118A0, 0x118DF),
    (0x1E900, 0x1E943),
];

impl Class {
    /// Does code point `c` (with flags `f`) belong to the class?
    ///
    /// Classes written with literal code points are matched against `c` after non-ASCII
    /// white space has been folded to U+000B, as the reference implementation does before
    /// running such regexes; `\p{..}` classes use the category flags.
    #[inline]
    fn contains(self, c: u32, f: Flags) -> bool {
        let lit = if c > 0x7F && f.is_whitespace() {
            0x0B
        } else {
            c
        };
        match self {
            Class::Number => f.is_number(),
            Class::Letter => f.is_letter(),
            Class::Punct => f.is_punct(),
            Class::CrLf => c == '\r' as u32 || c == '\n' as u32,
            Class::PunctDefault => {
                f.is_punct() || matches!(lit, 0x24 | 0x2B | 0x3C..=0x3E | 0x5E | 0x7E | 0x7C)
            }
            Class::PunctFalcon => {
                f.is_punct() || matches!(lit, 0x24 | 0x2B | 0x3C..=0x3E | 0x5E | 0x7E | 0x7C | 0x60)
            }
            Class::DeepseekCjk => {
                matches!(lit, 0x0800..=0x9FA5 | 0xAC00..=0xD7FF)
            }
            Class::DeepseekLatin => {
                let i = DEEPSEEK_LATIN.partition_point(|r| r.0 <= lit);
                i.checked_sub(1)
                    .and_then(|i| DEEPSEEK_LATIN.get(i))
                    .is_some_and(|r| lit <= r.1)
            }
            Class::DeepseekPunct => matches!(
                lit,
                0x21..=0x2F
                    | 0x3A..=0x7E
                    | 0xFF01..=0xFF0F
                    | 0xFF1A..=0xFF5E
                    | 0x2018..=0x201F
                    | 0x3000..=0x3002
            ),
            Class::BloomWord => {
                !(matches!(lit, 0x09..=0x0D | 0x20)
                    || matches!(
                        char::from_u32(lit),
                        Some('(' | '|' | ')' | '.' | ',' | '!' | '?' | '…' | '。' | '，' | '、')
                            | Some('।' | '۔' | '،')
                    ))
            }
        }
    }
}

/// What may precede a run in a `P?X+` step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefix {
    /// `\s?`
    Space,
    /// ` ?` (a literal U+0020)
    Blank,
}

/// One splitting step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` with D = `max_digits` (LLaMA-3: 3,
    /// Qwen2: 1).
    Llama3 { max_digits: usize },
    /// Qwen3.5: the Qwen2 pattern with `\p{M}` joined to letters.
    Qwen35,
    /// `[^\n]+|[\n]+`
    Newlines,
    /// `X` (each matching code point alone)
    Single(Class),
    /// `X+`
    Run(Class),
    /// `\s?X+` or ` ?X+`
    PrefixedRun(Prefix, Class),
    /// `[0-9][0-9][0-9]`
    ThreeDigits,
    /// `\s+$`
    TrailingSpace,
}

/// The text being split: code points and their flags.
pub struct Cpts<'a> {
    pub cpt: &'a [u32],
    pub flags: &'a [Flags],
}

const OOR: u32 = u32::MAX;

/// Bounds-checked view of one fragment `[start, end)`.
struct Frag<'a> {
    cpt: &'a [u32],
    flags: &'a [Flags],
    end: usize,
    start: usize,
}

impl Frag<'_> {
    #[inline]
    fn c(&self, p: usize) -> u32 {
        if p >= self.start && p < self.end {
            self.cpt.get(p).copied().unwrap_or(OOR)
        } else {
            OOR
        }
    }
    #[inline]
    fn f(&self, p: usize) -> Flags {
        if p >= self.start && p < self.end {
            self.flags.get(p).copied().unwrap_or(Flags::NONE)
        } else {
            Flags::NONE
        }
    }
}

/// Apply `steps` to the whole of `text`; returns fragment lengths in code points.
pub fn split(text: &Cpts<'_>, steps: &[Step]) -> Vec<usize> {
    let n = text.cpt.len();
    let mut frags = if n == 0 { Vec::new() } else { vec![n] };
    let mut next = Vec::with_capacity(n / 3 + 1);
    for step in steps {
        next.clear();
        let mut start = 0;
        for &len in &frags {
            let frag = Frag {
                cpt: text.cpt,
                flags: text.flags,
                start,
                end: start + len,
            };
            step.split_fragment(&frag, &mut next);
            start += len;
        }
        std::mem::swap(&mut frags, &mut next);
    }
    frags
}

/// Collects the pieces of one fragment; `pos` is always the end of the last piece.
struct Out<'a> {
    out: &'a mut Vec<usize>,
    pos: usize,
}

impl Out<'_> {
    #[inline]
    fn to(&mut self, end: usize) {
        if end > self.pos {
            self.out.push(end - self.pos);
        }
        self.pos = end;
    }
}

#[inline]
fn is_rn(c: u32) -> bool {
    c == '\r' as u32 || c == '\n' as u32
}

#[inline]
fn contraction_len(fr: &Frag<'_>, pos: usize, fold_case: bool) -> usize {
    let lower = |c: u32| {
        if fold_case && (0x41..=0x5A).contains(&c) {
            c + 32
        } else {
            c
        }
    };
    if fr.c(pos) != '\'' as u32 || pos + 1 >= fr.end {
        return 0;
    }
    let n = lower(fr.c(pos + 1));
    if [b's', b't', b'm', b'd'].iter().any(|&b| n == u32::from(b)) {
        return 2;
    }
    if pos + 2 < fr.end {
        let nn = lower(fr.c(pos + 2));
        let pair = |a: u8, b: u8| n == u32::from(a) && nn == u32::from(b);
        if pair(b'r', b'e') || pair(b'v', b'e') || pair(b'l', b'l') {
            return 3;
        }
    }
    0
}

impl Step {
    fn split_fragment(&self, fr: &Frag<'_>, out: &mut Vec<usize>) {
        let mut o = Out { out, pos: fr.start };
        match *self {
            Step::Gpt2 => gpt2(fr, &mut o),
            Step::Llama3 { max_digits } => llama3(fr, &mut o, max_digits, false),
            Step::Qwen35 => llama3(fr, &mut o, 1, true),
            Step::Newlines => {
                let mut p = fr.start;
                while p < fr.end {
                    let nl = fr.c(p) == '\n' as u32;
                    while p < fr.end && (fr.c(p) == '\n' as u32) == nl {
                        p += 1;
                    }
                    o.to(p);
                }
            }
            Step::Single(class) => {
                for p in fr.start..fr.end {
                    if class.contains(fr.c(p), fr.f(p)) {
                        o.to(p);
                        o.to(p + 1);
                    }
                }
            }
            Step::Run(class) => {
                let mut p = fr.start;
                while p < fr.end {
                    if class.contains(fr.c(p), fr.f(p)) {
                        o.to(p);
                        while p < fr.end && class.contains(fr.c(p), fr.f(p)) {
                            p += 1;
                        }
                        o.to(p);
                    } else {
                        p += 1;
                    }
                }
            }
            Step::PrefixedRun(prefix, class) => {
                let is_prefix = |p: usize| match prefix {
                    Prefix::Space => fr.f(p).is_whitespace(),
                    Prefix::Blank => fr.c(p) == ' ' as u32,
                };
                let in_class = |p: usize| p < fr.end && class.contains(fr.c(p), fr.f(p));
                let mut p = fr.start;
                while p < fr.end {
                    let begin = p;
                    if is_prefix(p) && in_class(p + 1) {
                        p += 1;
                    } else if !in_class(p) {
                        p += 1;
                        continue;
                    }
                    while in_class(p) {
                        p += 1;
                    }
                    o.to(begin);
                    o.to(p);
                }
            }
            Step::ThreeDigits => {
                let digit = |p: usize| (0x30..=0x39).contains(&fr.c(p));
                let mut p = fr.start;
                while p + 3 <= fr.end {
                    if digit(p) && digit(p + 1) && digit(p + 2) {
                        o.to(p);
                        o.to(p + 3);
                        p += 3;
                    } else {
                        p += 1;
                    }
                }
            }
            Step::TrailingSpace => {
                let mut p = fr.end;
                while p > fr.start && fr.f(p - 1).is_whitespace() {
                    p -= 1;
                }
                o.to(p);
            }
        }
        o.to(fr.end);
    }
}

fn gpt2(fr: &Frag<'_>, o: &mut Out<'_>) {
    let mut pos = fr.start;
    while pos < fr.end {
        let c = fr.c(pos);
        let f = fr.f(pos);
        let k = contraction_len(fr, pos, false);
        if k > 0 {
            pos += k;
            o.to(pos);
            continue;
        }
        let space = c == ' ' as u32;
        let f2 = if space { fr.f(pos + 1) } else { f };
        if f2.is_letter() || f2.is_number() {
            let letter = f2.is_letter();
            pos += usize::from(space);
            while if letter {
                fr.f(pos).is_letter()
            } else {
                fr.f(pos).is_number()
            } {
                pos += 1;
            }
            o.to(pos);
            continue;
        }
        let other =
            |g: Flags| !(g.is_whitespace() || g.is_letter() || g.is_number()) && g.is_some();
        if other(f2) {
            pos += usize::from(space);
            while other(fr.f(pos)) {
                pos += 1;
            }
            o.to(pos);
            continue;
        }
        let mut nws = 0;
        while fr.f(pos + nws).is_whitespace() {
            nws += 1;
        }
        if nws > 1 && fr.c(pos + nws) != OOR {
            pos += nws - 1;
        } else if nws > 0 {
            pos += nws;
        } else {
            pos += 1;
        }
        o.to(pos);
    }
}

/// LLaMA-3 / Qwen2 (`marks == false`) and Qwen3.5 (`marks == true`, letters include `\p{M}`).
fn llama3(fr: &Frag<'_>, o: &mut Out<'_>, max_digits: usize, marks: bool) {
    let word = |g: Flags| g.is_letter() || (marks && g.is_mark());
    let mut pos = fr.start;
    while pos < fr.end {
        let c = fr.c(pos);
        let f = fr.f(pos);
        let k = contraction_len(fr, pos, true);
        if k > 0 {
            pos += k;
            o.to(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(is_rn(c) || f.is_number()) && (word(f) || word(fr.f(pos + 1))) {
            pos += 1;
            while word(fr.f(pos)) {
                pos += 1;
            }
            o.to(pos);
            continue;
        }
        // \p{N}{1,max_digits}
        if f.is_number() {
            let mut ini = pos;
            while fr.f(pos).is_number() {
                pos += 1;
                if pos - ini >= max_digits {
                    o.to(pos);
                    ini = pos;
                }
            }
            o.to(pos);
            continue;
        }
        // <space>?[^\s\p{L}\p{N}]+[\r\n]*
        let f2 = if c == ' ' as u32 { fr.f(pos + 1) } else { f };
        let other = |g: Flags| !(g.is_whitespace() || word(g) || g.is_number());
        if other(f2) && f.is_some() {
            pos += usize::from(c == ' ' as u32);
            while other(fr.f(pos)) && fr.f(pos).is_some() {
                pos += 1;
            }
            while is_rn(fr.c(pos)) {
                pos += 1;
            }
            o.to(pos);
            continue;
        }
        let mut nws = 0;
        let mut last_rn = 0;
        while fr.f(pos + nws).is_whitespace() {
            if is_rn(fr.c(pos + nws)) {
                last_rn = pos + nws + 1;
            }
            nws += 1;
        }
        if last_rn > 0 {
            pos = last_rn; // \s*[\r\n]+
        } else if nws > 1 && fr.c(pos + nws) != OOR {
            pos += nws - 1; // \s+(?!\S)
        } else if nws > 0 {
            pos += nws; // \s+
        } else {
            pos += 1;
        }
        o.to(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::super::unicode::flags;
    use super::*;

    fn run(text: &str, steps: &[Step]) -> Vec<String> {
        let cpt: Vec<u32> = text.chars().map(|c| c as u32).collect();
        let fl: Vec<Flags> = cpt.iter().map(|&c| flags(c)).collect();
        let lens = split(
            &Cpts {
                cpt: &cpt,
                flags: &fl,
            },
            steps,
        );
        let mut it = text.chars();
        lens.iter()
            .map(|&n| it.by_ref().take(n).collect())
            .collect()
    }

    #[test]
    fn gpt2_splits_like_the_regex() {
        assert_eq!(
            run("Hello world's  end 123!!\n\n  x", &[Step::Gpt2]),
            [
                "Hello", " world", "'s", " ", " end", " 123", "!!", "\n\n ", " x"
            ]
        );
        assert_eq!(run("a   ", &[Step::Gpt2]), ["a", "   "]);
    }

    #[test]
    fn llama3_groups_digits_and_newlines() {
        let s = [Step::Llama3 { max_digits: 3 }];
        assert_eq!(run("1234567 x", &s), ["123", "456", "7", " x"]);
        assert_eq!(
            run("I'LL go\n\n  now", &s),
            ["I", "'LL", " go", "\n\n", " ", " now"]
        );
        assert_eq!(run("foo(bar);\n", &s), ["foo", "(bar", ");\n"]);
        let q = [Step::Llama3 { max_digits: 1 }];
        assert_eq!(run("x 42", &q), ["x", " ", "4", "2"]);
    }

    #[test]
    fn generic_steps() {
        assert_eq!(
            run("ab12c3", &[Step::Single(Class::Number)]),
            ["ab", "1", "2", "c", "3"]
        );
        assert_eq!(run("12345", &[Step::ThreeDigits]), ["123", "45"]);
        assert_eq!(run("a b  ", &[Step::TrailingSpace]), ["a b", "  "]);
        assert_eq!(
            run(
                " ab,  cd",
                &[Step::PrefixedRun(Prefix::Space, Class::Letter)]
            ),
            [" ab", ", ", " cd"]
        );
        assert_eq!(run("x\n\ny\n", &[Step::Newlines]), ["x", "\n\n", "y", "\n"]);
        assert_eq!(
            run("a$+b", &[Step::Run(Class::PunctDefault)]),
            ["a", "$+", "b"]
        );
    }
}
