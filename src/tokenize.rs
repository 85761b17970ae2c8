//! Tokenizing as a stage (feature `tokenize`): a Hugging Face tokenizer
//! (`tokenizer.json`, loaded once by the `tokenizers` crate and shared by
//! every transform worker) applied to a text field, giving a ragged `i32`
//! token field (`input_ids`) per document, with a BOS and/or EOS token per
//! document if asked. It is an [`InstanceMap`]: it runs on the transform
//! workers, after the shuffle draw, and a text that is not UTF-8 or that
//! the tokenizer refuses is a bad record naming its file and record.
//!
//! The ids are what `tokenizers.Tokenizer.from_file(path).encode(text).ids`
//! gives in Python (special tokens added by the tokenizer's own
//! post-processor, as Python's default does), then the BOS/EOS asked for.
//!
//! Two paths give them. A GPT-2-style byte-level BPE (`ByteLevel`
//! pre-tokenizer and `BPE` model, what `ByteLevelBPETokenizer` trains) is
//! tokenized by this crate's own fast path (`src/tokenize/fast.rs`: several
//! times the crate's speed, the same ids);
//! any other shape by the `tokenizers` crate's `encode_fast`. Which one a
//! tokenizer gets is decided once at load ([`Tokenizer::has_fast_path`];
//! the reason for the crate's path is logged at debug level).
//!
//! ```no_run
//! use feedline::tokenize::{Tokenize, Tokenizer};
//! let tokenizer = Tokenizer::from_file("tokenizer.json").unwrap();
//! let stage = Tokenize::new(tokenizer, "text").add_eos(true).unwrap();
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::format::generator::Sample;
use crate::schema::{DType, Ragged, Schema};
use crate::transform::{BoxError, InstanceMap, Row, TransformCtx};
use crate::Values;

mod fast;

/// Names an EOS token goes by in common tokenizers, tried in order.
pub const EOS_NAMES: [&str; 5] = ["<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]"];
/// Names a BOS token goes by in common tokenizers, tried in order.
pub const BOS_NAMES: [&str; 4] = ["<s>", "<bos>", "<|begin_of_text|>", "[CLS]"];

/// What went wrong loading a tokenizer or setting the stage up.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// The tokenizer file could not be read or parsed.
    #[error("tokenizer {path}: {what}")]
    Load {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// BOS or EOS was asked for and the tokenizer has no such token.
    #[error("tokenizer {path}: {which} asked for, but none of the tokens {names} is in its vocabulary: name it ({flag})")]
    NoSpecialToken {
        /// The file.
        path: String,
        /// `EOS` or `BOS`.
        which: &'static str,
        /// The names tried.
        names: String,
        /// The setting that names it.
        flag: &'static str,
    },
    /// The text field is not named.
    #[error("the text field to tokenize must be named")]
    NoTextField,
}

/// A Hugging Face tokenizer loaded from its `tokenizer.json`, cheap to clone.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    /// The fast path, where the tokenizer has a shape it reproduces.
    fast: Option<Arc<fast::FastBpe>>,
    path: String,
    digest: String,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tokenizer({})", self.path)
    }
}

impl Tokenizer {
    /// Load `path` (a `tokenizer.json`).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizeError> {
        let p = path.as_ref();
        let shown = p.display().to_string();
        let bytes = std::fs::read(p).map_err(|e| TokenizeError::Load {
            path: shown.clone(),
            what: e.to_string(),
        })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| TokenizeError::Load {
            path: shown.clone(),
            what: format!("not a tokenizer.json the tokenizers crate reads: {e}"),
        })?;
        let digest = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>();
        let json: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| TokenizeError::Load {
                path: shown.clone(),
                what: format!("not JSON: {e}"),
            })?;
        let fast = match fast::FastBpe::new(&inner, &json) {
            Ok(f) => {
                log::debug!("tokenizer {shown}: byte-level BPE, feedline's fast path");
                Some(Arc::new(f))
            }
            Err(why) => {
                log::debug!("tokenizer {shown}: the tokenizers crate's path ({why})");
                None
            }
        };
        Ok(Tokenizer {
            inner: Arc::new(inner),
            fast,
            path: shown,
            digest,
        })
    }

    /// Whether its ids come from the fast path (a GPT-2-style byte-level
    /// BPE), not the `tokenizers` crate's `encode_fast`.
    pub fn has_fast_path(&self) -> bool {
        self.fast.is_some()
    }

    /// The same tokenizer without the fast path: every text through the
    /// `tokenizers` crate (the reference the fast path is compared with).
    pub fn crate_path_only(mut self) -> Self {
        self.fast = None;
        self
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The id of token `name`, if the vocabulary has it.
    pub fn token_id(&self, name: &str) -> Option<u32> {
        self.inner.token_to_id(name)
    }

    /// The ids of `text` (special tokens added as the tokenizer's
    /// post-processor says, as Python's `encode` does by default).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, BoxError> {
        match &self.fast {
            Some(fast) => Ok(fast.encode(text)),
            None => self.encode_crate(text),
        }
    }

    /// The ids of `text` from the `tokenizers` crate's `encode_fast`,
    /// whichever path [`encode`](Self::encode) takes.
    pub fn encode_crate(&self, text: &str) -> Result<Vec<u32>, BoxError> {
        Ok(self.inner.encode_fast(text, true)?.get_ids().to_vec())
    }

    fn special(
        &self,
        name: Option<&str>,
        names: &[&str],
        which: &'static str,
        flag: &'static str,
    ) -> Result<u32, TokenizeError> {
        let tried: Vec<&str> = match name {
            Some(n) => vec![n],
            None => names.to_vec(),
        };
        tried
            .iter()
            .find_map(|n| self.token_id(n))
            .ok_or_else(|| TokenizeError::NoSpecialToken {
                path: self.path.clone(),
                which,
                names: tried.join(", "),
                flag,
            })
    }
}

/// The tokenizing stage: `text_field` → ragged `i32` `input_ids`.
#[derive(Clone, Debug)]
pub struct Tokenize {
    tokenizer: Tokenizer,
    text_field: String,
    output: String,
    bos: Option<u32>,
    eos: Option<u32>,
}

impl Tokenize {
    /// Tokenize `text_field` with `tokenizer` into `input_ids`.
    pub fn new(tokenizer: Tokenizer, text_field: &str) -> Self {
        Tokenize {
            tokenizer,
            text_field: text_field.to_string(),
            output: "input_ids".to_string(),
            bos: None,
            eos: None,
        }
    }

    /// Append the tokenizer's EOS token to every document (one of
    /// [`EOS_NAMES`]; [`eos_token`](Self::eos_token) names another).
    pub fn add_eos(mut self, on: bool) -> Result<Self, TokenizeError> {
        self.eos = if on {
            Some(
                self.tokenizer
                    .special(None, &EOS_NAMES, "EOS", "eos_token")?,
            )
        } else {
            None
        };
        Ok(self)
    }

    /// Append token `name` to every document.
    pub fn eos_token(mut self, name: &str) -> Result<Self, TokenizeError> {
        self.eos = Some(
            self.tokenizer
                .special(Some(name), &[], "EOS", "eos_token")?,
        );
        Ok(self)
    }

    /// Put the tokenizer's BOS token first in every document (one of
    /// [`BOS_NAMES`]).
    pub fn add_bos(mut self, on: bool) -> Result<Self, TokenizeError> {
        self.bos = if on {
            Some(
                self.tokenizer
                    .special(None, &BOS_NAMES, "BOS", "bos_token")?,
            )
        } else {
            None
        };
        Ok(self)
    }

    /// The text field read.
    pub fn text_field(&self) -> &str {
        &self.text_field
    }

    /// Check the settings (a named text field).
    pub fn check(&self) -> Result<(), TokenizeError> {
        if self.text_field.is_empty() {
            return Err(TokenizeError::NoTextField);
        }
        Ok(())
    }

    /// The ids of one document's text.
    pub fn ids(&self, text: &[u8]) -> Result<Vec<i32>, BoxError> {
        let text = std::str::from_utf8(text).map_err(|e| {
            format!(
                "field `{}`: not UTF-8 text ({e}); expected text to tokenize",
                self.text_field
            )
        })?;
        let ids = self.tokenizer.encode(text)?;
        let mut out = Vec::with_capacity(ids.len() + 2);
        out.extend(self.bos.map(|b| b as i32));
        out.extend(ids.into_iter().map(|i| i as i32));
        out.extend(self.eos.map(|e| e as i32));
        Ok(out)
    }
}

impl InstanceMap for Tokenize {
    fn map(&self, row: &Row<'_>, _ctx: &mut TransformCtx) -> Result<Sample, BoxError> {
        let text = row.bytes(&self.text_field)?;
        let ids = self.ids(&text)?;
        let n = ids.len();
        Ok(Sample::new().with(self.output.clone(), Values::I32(ids), [n]))
    }

    fn output_schema(&self, _input: &Schema) -> Option<Schema> {
        Schema::builder()
            .ragged(&self.output, DType::I32, Ragged::Offsets)
            .build()
            .ok()
    }

    fn name(&self) -> String {
        format!("tokenize({})", self.text_field)
    }

    fn version(&self) -> Option<String> {
        Some(format!(
            "sha256:{} bos:{:?} eos:{:?}",
            self.tokenizer.digest, self.bos, self.eos
        ))
    }
}
