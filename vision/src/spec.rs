//! The `--transform SPEC` language: a preset name or a comma-separated
//! chain of steps, parsed into a [`Plan`] ([`Plan::parse`] is written
//! here, above the plan). Every error ([`SpecError`]) says where (column)
//! and what was expected.
//!
//! # Grammar
//!
//! ```text
//! spec   := preset | step ("," step)*
//! preset := "decode" | "imagenet-train" | "imagenet-eval"
//! step   := name [ "(" [ arg ("," arg)* ] ")" ]
//! arg    := value | key "=" value
//! value  := number | number ":" number [":" number] | number "x" number | word
//! ```
//!
//! Spaces around tokens are ignored. Steps, in this order:
//!
//! | step | meaning |
//! |---|---|
//! | `decode` | JPEG or PNG bytes to `u8 [H, W, 3]` RGB (first, and required) |
//! | `random-resized-crop(SIZE[, scale=LO:HI][, ratio=LO:HI])` (or `rrc`) | torchvision `RandomResizedCrop(SIZE)`; default scale `0.08:1`, ratio `0.75:1.3333333333333333` (3/4 : 4/3) |
//! | `resize(N)` / `resize(HxW)` | antialiased bilinear: shorter side to N (aspect kept), or exactly H x W |
//! | `center-crop(N)` / `center-crop(HxW)` | the centred window (zero-padded if larger than the image) |
//! | `flip` / `flip(P)` | horizontal flip with probability P (default 0.5) |
//! | `to-f32` | `f32` values in [0, 1] (`v / 255`) |
//! | `normalize(imagenet)` / `normalize(mean=R:G:B, std=R:G:B)` | `(v / 255 - mean) / std`, `f32` (implies `to-f32`) |
//! | `hwc` / `chw` | output layout `[H, W, 3]` (default) or `[3, H, W]` |
//!
//! `SIZE` is `N` (square) or `HxW`. The geometric steps (`random-resized-crop`,
//! `resize`, `center-crop`, `flip`) come before the output steps (`to-f32`,
//! `normalize`, `hwc`/`chw`), and each output step appears at most once.
//!
//! The presets:
//!
//! | preset | chain | output |
//! |---|---|---|
//! | `decode` | `decode` | `u8 [H, W, 3]`, H and W those of the image |
//! | `imagenet-train` | `decode,random-resized-crop(224),flip(0.5),normalize(imagenet),chw` | `f32 [3, 224, 224]` |
//! | `imagenet-eval` | `decode,resize(256),center-crop(224),normalize(imagenet),chw` | `f32 [3, 224, 224]` |
//!
//! ```
//! use feedline_vision::{Dtype, OutputShape, Plan};
//! let plan = Plan::parse("decode, resize(256), center-crop(224), to-f32, chw").unwrap();
//! assert_eq!(plan.dtype(), Dtype::F32);
//! assert_eq!(plan.shape(), OutputShape::Fixed([3, 224, 224]));
//! let err = Plan::parse("decode,resize(256").unwrap_err();
//! assert!(err.to_string().contains("column 18"), "{err}");
//! ```

use std::fmt;

pub use crate::error::SpecError;
use crate::ops::ResizeTo;
use crate::output::{Layout, Normalize};
use crate::rrc::RandomResizedCrop;
use crate::transform_plan::{GeomOp, Plan};

/// The presets, and the chain each stands for.
pub const PRESETS: [(&str, &str); 3] = [
    ("decode", "decode"),
    (
        "imagenet-train",
        "decode,random-resized-crop(224),flip(0.5),normalize(imagenet),chw",
    ),
    (
        "imagenet-eval",
        "decode,resize(256),center-crop(224),normalize(imagenet),chw",
    ),
];

/// The step names, for the "expected one of" messages.
const STEP_NAMES: &str =
    "decode, random-resized-crop (rrc), resize, center-crop, flip, to-f32, normalize, hwc, chw";

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Number(f64, String),
    Punct(char),
    End,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Word(w) => write!(f, "'{w}'"),
            Token::Number(_, text) => write!(f, "'{text}'"),
            Token::Punct(c) => write!(f, "'{c}'"),
            Token::End => write!(f, "the end of the spec"),
        }
    }
}

struct Lexer<'a> {
    spec: &'a str,
    chars: Vec<(usize, char)>,
    at: usize,
}

/// A value with the column it starts at.
#[derive(Clone, Debug)]
enum Value {
    Number(f64),
    /// `a:b` or `a:b:c`
    List(Vec<f64>),
    /// `HxW`
    Size(f64, f64),
    Word(String),
}

#[derive(Clone, Debug)]
struct Arg {
    key: Option<String>,
    value: Value,
    column: usize,
}

#[derive(Clone, Debug)]
struct Step {
    name: String,
    column: usize,
    args: Vec<Arg>,
    /// Column of the closing parenthesis, or of the name's end without one.
    end_column: usize,
}

impl<'a> Lexer<'a> {
    fn new(spec: &'a str) -> Self {
        Lexer {
            spec,
            chars: spec.char_indices().collect(),
            at: 0,
        }
    }

    fn error(&self, column: usize, message: impl Into<String>) -> SpecError {
        SpecError {
            spec: self.spec.to_string(),
            column,
            message: message.into(),
        }
    }

    fn skip_space(&mut self) {
        while self.at < self.chars.len() && self.chars[self.at].1.is_whitespace() {
            self.at += 1;
        }
    }

    /// The 1-based column of the next token.
    fn column(&mut self) -> usize {
        self.skip_space();
        self.at + 1
    }

    fn peek(&mut self) -> Token {
        let save = self.at;
        let token = self.next_token().map(|(t, _)| t).unwrap_or(Token::End);
        self.at = save;
        token
    }

    fn next_token(&mut self) -> Result<(Token, usize), SpecError> {
        self.skip_space();
        let column = self.at + 1;
        let Some(&(_, c)) = self.chars.get(self.at) else {
            return Ok((Token::End, column));
        };
        if c.is_ascii_alphabetic() {
            let start = self.at;
            while self.at < self.chars.len() {
                let c = self.chars[self.at].1;
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    self.at += 1;
                } else {
                    break;
                }
            }
            let word: String = self.chars[start..self.at].iter().map(|&(_, c)| c).collect();
            return Ok((Token::Word(word), column));
        }
        if c.is_ascii_digit() || c == '.' || c == '-' || c == '+' {
            let start = self.at;
            self.at += 1;
            while self.at < self.chars.len() {
                let c = self.chars[self.at].1;
                let prev = self.chars[self.at - 1].1;
                let exponent_sign = (c == '-' || c == '+') && (prev == 'e' || prev == 'E');
                let exponent = (c == 'e' || c == 'E')
                    && self
                        .chars
                        .get(self.at + 1)
                        .is_some_and(|&(_, n)| n.is_ascii_digit() || n == '-' || n == '+');
                if c.is_ascii_digit() || c == '.' || exponent || exponent_sign {
                    self.at += 1;
                } else {
                    break;
                }
            }
            let text: String = self.chars[start..self.at].iter().map(|&(_, c)| c).collect();
            let value: f64 = text
                .parse()
                .map_err(|_| self.error(column, format!("'{text}' is not a number")))?;
            return Ok((Token::Number(value, text), column));
        }
        if "(),=:".contains(c) {
            self.at += 1;
            return Ok((Token::Punct(c), column));
        }
        Err(self.error(
            column,
            format!(
                "unexpected character '{c}' (expected a step name, a number, or one of ( ) , = :)"
            ),
        ))
    }

    fn number(&mut self, context: &str) -> Result<f64, SpecError> {
        let (token, column) = self.next_token()?;
        match token {
            Token::Number(v, _) => Ok(v),
            other => Err(self.error(
                column,
                format!("expected a number {context}, found {other}"),
            )),
        }
    }

    /// `number [(":" number)*] | number "x" number | word`
    fn value(&mut self, context: &str) -> Result<Value, SpecError> {
        let (token, column) = self.next_token()?;
        match token {
            Token::Word(w) => Ok(Value::Word(w)),
            Token::Number(first, _) => {
                // `224x224` lexes as a number then the word `x224`.
                if let Token::Word(w) = self.peek() {
                    if let Some(rest) = w.strip_prefix('x') {
                        let word_column = self.column();
                        self.next_token()?;
                        let second: f64 = rest.parse().map_err(|_| {
                            self.error(
                                word_column + 1,
                                format!(
                                    "expected the width after 'x' in a HxW size, found '{rest}'"
                                ),
                            )
                        })?;
                        return Ok(Value::Size(first, second));
                    }
                    let column = self.column();
                    return Err(
                        self.error(column, format!("unexpected '{w}' after a number {context}"))
                    );
                }
                let mut list = vec![first];
                while self.peek() == Token::Punct(':') {
                    self.next_token()?;
                    list.push(self.number("after ':'")?);
                }
                Ok(if list.len() == 1 {
                    Value::Number(first)
                } else {
                    Value::List(list)
                })
            }
            other => Err(self.error(column, format!("expected a value {context}, found {other}"))),
        }
    }

    fn step(&mut self) -> Result<Step, SpecError> {
        let (token, column) = self.next_token()?;
        let name = match token {
            Token::Word(w) => w,
            other => {
                return Err(self.error(
                    column,
                    format!("expected a step name ({STEP_NAMES}), found {other}"),
                ))
            }
        };
        let mut args = Vec::new();
        let mut end_column = column + name.chars().count();
        if self.peek() == Token::Punct('(') {
            self.next_token()?;
            if self.peek() == Token::Punct(')') {
                end_column = self.column();
                self.next_token()?;
            } else {
                loop {
                    let arg_column = self.column();
                    let context = format!("in the arguments of '{name}'");
                    let mut key = None;
                    if let Token::Word(w) = self.peek() {
                        let save = self.at;
                        self.next_token()?;
                        if self.peek() == Token::Punct('=') {
                            self.next_token()?;
                            key = Some(w);
                        } else {
                            self.at = save;
                        }
                    }
                    let value_context = match &key {
                        Some(k) => format!("after '{k}='"),
                        None => context.clone(),
                    };
                    let value = self.value(&value_context)?;
                    args.push(Arg {
                        key,
                        value,
                        column: arg_column,
                    });
                    let (token, column) = self.next_token()?;
                    match token {
                        Token::Punct(',') => continue,
                        Token::Punct(')') => {
                            end_column = column;
                            break;
                        }
                        other => {
                            return Err(self.error(
                                column,
                                format!("expected ',' or ')' {context}, found {other}"),
                            ))
                        }
                    }
                }
            }
        }
        Ok(Step {
            name,
            column,
            args,
            end_column,
        })
    }

    fn chain(&mut self) -> Result<Vec<Step>, SpecError> {
        let mut steps = vec![self.step()?];
        loop {
            let (token, column) = self.next_token()?;
            match token {
                Token::End => return Ok(steps),
                Token::Punct(',') => steps.push(self.step()?),
                other => {
                    return Err(self.error(
                        column,
                        format!("expected ',' and the next step, or the end, found {other}"),
                    ))
                }
            }
        }
    }
}

/// Builds the plan of the steps, checking each argument.
struct Compiler<'a> {
    lexer: &'a Lexer<'a>,
}

impl Compiler<'_> {
    fn error(&self, column: usize, message: impl Into<String>) -> SpecError {
        self.lexer.error(column, message)
    }

    fn no_args(&self, step: &Step) -> Result<(), SpecError> {
        match step.args.first() {
            Some(arg) => Err(self.error(arg.column, format!("'{}' takes no arguments", step.name))),
            None => Ok(()),
        }
    }

    fn size(&self, arg: &Arg, what: &str) -> Result<(usize, usize), SpecError> {
        let side = |v: f64| -> Result<usize, SpecError> {
            if v.fract() == 0.0 && (1.0..=65_535.0).contains(&v) {
                Ok(v as usize)
            } else {
                Err(self.error(
                    arg.column,
                    format!("{what}: a side must be a whole number in 1..=65535, got {v}"),
                ))
            }
        };
        match &arg.value {
            Value::Number(n) => Ok((side(*n)?, side(*n)?)),
            Value::Size(h, w) => Ok((side(*h)?, side(*w)?)),
            other => Err(self.error(
                arg.column,
                format!("{what}: expected N or HxW, found {}", describe(other)),
            )),
        }
    }

    fn range(&self, arg: &Arg, what: &str) -> Result<(f64, f64), SpecError> {
        match &arg.value {
            Value::List(list) if list.len() == 2 => Ok((list[0], list[1])),
            other => Err(self.error(
                arg.column,
                format!("{what}: expected LO:HI, found {}", describe(other)),
            )),
        }
    }

    fn triple(&self, arg: &Arg, what: &str) -> Result<[f32; 3], SpecError> {
        match &arg.value {
            Value::List(list) if list.len() == 3 => {
                Ok([list[0] as f32, list[1] as f32, list[2] as f32])
            }
            Value::Number(v) => Ok([*v as f32; 3]),
            other => Err(self.error(
                arg.column,
                format!(
                    "{what}: expected R:G:B or one number, found {}",
                    describe(other)
                ),
            )),
        }
    }

    /// The positional argument and the keyword ones, each checked against `keys`.
    fn split_args<'s>(
        &self,
        step: &'s Step,
        keys: &[&str],
        max_positional: usize,
    ) -> Result<(Vec<&'s Arg>, Vec<&'s Arg>), SpecError> {
        let mut positional = Vec::new();
        let mut keyword: Vec<&Arg> = Vec::new();
        for arg in &step.args {
            match &arg.key {
                None => {
                    if !keyword.is_empty() {
                        return Err(self.error(
                            arg.column,
                            format!("'{}': a positional argument after a keyword one", step.name),
                        ));
                    }
                    if positional.len() == max_positional {
                        return Err(self.error(
                            arg.column,
                            format!(
                                "'{}' takes at most {max_positional} positional argument(s)",
                                step.name
                            ),
                        ));
                    }
                    positional.push(arg);
                }
                Some(k) => {
                    if !keys.contains(&k.as_str()) {
                        let allowed = if keys.is_empty() {
                            "none".to_string()
                        } else {
                            keys.join(", ")
                        };
                        return Err(self.error(
                            arg.column,
                            format!(
                                "'{}' has no argument '{k}' (its keyword arguments: {allowed})",
                                step.name
                            ),
                        ));
                    }
                    if keyword.iter().any(|a| a.key == arg.key) {
                        return Err(
                            self.error(arg.column, format!("'{}': '{k}' given twice", step.name))
                        );
                    }
                    keyword.push(arg);
                }
            }
        }
        Ok((positional, keyword))
    }

    fn compile(&self, steps: &[Step]) -> Result<Plan, SpecError> {
        let first = &steps[0];
        if first.name != "decode" {
            return Err(self.error(
                first.column,
                format!("a chain starts with 'decode', found '{}'", first.name),
            ));
        }
        self.no_args(first)?;
        let mut geometry = Vec::new();
        let mut to_f32 = None;
        let mut normalize = None;
        let mut layout = None;
        let mut output_step_seen: Option<&Step> = None;
        for step in &steps[1..] {
            let geometric = matches!(
                step.name.as_str(),
                "random-resized-crop" | "rrc" | "resize" | "center-crop" | "flip"
            );
            if geometric {
                if let Some(out) = output_step_seen {
                    return Err(self.error(
                        step.column,
                        format!(
                            "'{}' comes after the output step '{}': geometric steps come first",
                            step.name, out.name
                        ),
                    ));
                }
            }
            match step.name.as_str() {
                "decode" => return Err(self.error(step.column, "'decode' appears twice")),
                "random-resized-crop" | "rrc" => {
                    let (pos, kw) = self.split_args(step, &["scale", "ratio"], 1)?;
                    let Some(size_arg) = pos.first() else {
                        return Err(self.error(
                            step.end_column,
                            format!(
                                "'{}' needs its output size, e.g. {}(224)",
                                step.name, step.name
                            ),
                        ));
                    };
                    let (height, width) = self.size(size_arg, "random-resized-crop size")?;
                    let mut params = RandomResizedCrop::default();
                    for arg in kw {
                        match arg.key.as_deref() {
                            Some("scale") => params.scale = self.range(arg, "scale")?,
                            Some("ratio") => params.ratio = self.range(arg, "ratio")?,
                            _ => unreachable!("split_args checks the keys"),
                        }
                    }
                    let params = RandomResizedCrop::new(params.scale, params.ratio)
                        .map_err(|e| self.error(step.column, e.to_string()))?;
                    geometry.push(GeomOp::RandomResizedCrop {
                        height,
                        width,
                        params,
                    });
                }
                "resize" => {
                    let (pos, _) = self.split_args(step, &[], 1)?;
                    let Some(arg) = pos.first() else {
                        return Err(self.error(step.end_column, "'resize' needs a size: resize(N) for the shorter side, resize(HxW) for an exact size"));
                    };
                    let to = match arg.value {
                        Value::Number(_) => ResizeTo::Shorter(self.size(arg, "resize")?.0),
                        _ => {
                            let (height, width) = self.size(arg, "resize")?;
                            ResizeTo::Exact { height, width }
                        }
                    };
                    geometry.push(GeomOp::Resize(to));
                }
                "center-crop" => {
                    let (pos, _) = self.split_args(step, &[], 1)?;
                    let Some(arg) = pos.first() else {
                        return Err(self.error(
                            step.end_column,
                            "'center-crop' needs a size: center-crop(N) or center-crop(HxW)",
                        ));
                    };
                    let (height, width) = self.size(arg, "center-crop")?;
                    geometry.push(GeomOp::CenterCrop { height, width });
                }
                "flip" => {
                    let (pos, _) = self.split_args(step, &[], 1)?;
                    let p = match pos.first() {
                        None => 0.5,
                        Some(arg) => match arg.value {
                            Value::Number(p) if (0.0..=1.0).contains(&p) => p,
                            ref other => {
                                return Err(self.error(
                                    arg.column,
                                    format!(
                                        "flip: expected a probability in [0, 1], found {}",
                                        describe(other)
                                    ),
                                ))
                            }
                        },
                    };
                    geometry.push(GeomOp::Flip { p });
                }
                "to-f32" => {
                    self.no_args(step)?;
                    if to_f32.replace(step).is_some() {
                        return Err(self.error(step.column, "'to-f32' appears twice"));
                    }
                    output_step_seen = Some(step);
                }
                "normalize" => {
                    let (pos, kw) = self.split_args(step, &["mean", "std"], 1)?;
                    if normalize.is_some() {
                        return Err(self.error(step.column, "'normalize' appears twice"));
                    }
                    let n = match (pos.first(), kw.is_empty()) {
                        (Some(arg), true) => match &arg.value {
                            Value::Word(w) if w == "imagenet" => Normalize::IMAGENET,
                            other => return Err(self.error(arg.column, format!("normalize: expected 'imagenet' or mean=R:G:B,std=R:G:B, found {}", describe(other)))),
                        },
                        (None, false) => {
                            let find = |k: &str| kw.iter().find(|a| a.key.as_deref() == Some(k)).copied();
                            let (Some(mean), Some(std)) = (find("mean"), find("std")) else {
                                return Err(self.error(step.column, "normalize needs both mean=R:G:B and std=R:G:B"));
                            };
                            let n = Normalize::new(self.triple(mean, "mean")?, self.triple(std, "std")?);
                            n.map_err(|e| self.error(step.column, e.to_string()))?
                        }
                        (Some(arg), false) => return Err(self.error(arg.column, "normalize: give either 'imagenet' or mean= and std=, not both")),
                        (None, true) => return Err(self.error(step.end_column, "normalize needs 'imagenet' or mean=R:G:B,std=R:G:B")),
                    };
                    normalize = Some(n);
                    output_step_seen = Some(step);
                }
                "hwc" | "chw" => {
                    self.no_args(step)?;
                    if layout.is_some() {
                        return Err(
                            self.error(step.column, "the layout (hwc or chw) is given twice")
                        );
                    }
                    layout = Some(if step.name == "chw" {
                        Layout::Chw
                    } else {
                        Layout::Hwc
                    });
                    output_step_seen = Some(step);
                }
                other => {
                    let hint = PRESETS
                        .iter()
                        .find(|(name, _)| *name == other)
                        .map(|(name, _)| format!(" ('{name}' is a preset: use it alone)"))
                        .unwrap_or_default();
                    return Err(self.error(
                        step.column,
                        format!("unknown step '{other}'{hint}; expected one of: {STEP_NAMES}"),
                    ));
                }
            }
        }
        Ok(Plan::new(
            geometry,
            to_f32.is_some() || normalize.is_some(),
            normalize,
            layout.unwrap_or_default(),
        ))
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Number(n) => format!("the number {n}"),
        Value::List(list) => format!(
            "the list {}",
            list.iter()
                .map(f64::to_string)
                .collect::<Vec<_>>()
                .join(":")
        ),
        Value::Size(h, w) => format!("the size {h}x{w}"),
        Value::Word(w) => format!("the word '{w}'"),
    }
}

/// Parsing is the spec language's: written here, so that the plan (below
/// this file) does not know the grammar.
impl Plan {
    /// Parses a `--transform` spec, a preset name or a chain (see
    /// [`crate::spec`] for the grammar).
    pub fn parse(spec: &str) -> Result<Plan, SpecError> {
        let trimmed = spec.trim();
        let chain = PRESETS
            .iter()
            .find(|(name, _)| *name == trimmed)
            .map(|(_, chain)| *chain);
        if let Some(chain) = chain {
            let lexer = Lexer::new(chain);
            let steps = Lexer::new(chain).chain()?;
            return Compiler { lexer: &lexer }.compile(&steps);
        }
        if trimmed.is_empty() {
            return Err(SpecError {
                spec: spec.to_string(),
                column: 1,
                message: format!(
                    "empty spec: expected a preset ({}) or a chain starting with 'decode'",
                    PRESETS.map(|(n, _)| n).join(", ")
                ),
            });
        }
        let mut lexer = Lexer::new(spec);
        let steps = lexer.chain()?;
        Compiler { lexer: &lexer }.compile(&steps)
    }
}
