//! `feedline.Loader(...)`'s keywords translated into the Rust builder's
//! calls ([`LoaderKeywords::translate`]): each keyword parsed into its
//! value, what was given noted for the settings' check. No rule here: every
//! rule, across settings too, is the settings' check's
//! (`PipelineConfig::check`), its refusal spelled in keywords
//! ([`crate::errors::Keywords`]).

use feedline_actors::{
    Autotune, Equalize, ErrorPolicy, Given, Loader as RustLoader, LoaderBuilder, PipelineConfig,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::Keywords;
use crate::{checkpoint, logbridge, map, schema};

/// The keywords of `feedline.Loader(...)`, as Python gave them.
pub(crate) struct LoaderKeywords<'a, 'py> {
    pub files: &'a Bound<'py, PyAny>,
    pub batch_size: usize,
    pub shuffle: usize,
    pub seed: u64,
    pub passes: Option<u64>,
    pub readers: Option<usize>,
    pub deterministic: bool,
    pub drop_last: bool,
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    pub on_error: &'a str,
    pub max_bad: Option<u64>,
    pub schema: Option<Bound<'py, PyAny>>,
    pub capacity: Option<usize>,
    pub map: Option<Bound<'py, PyAny>>,
    pub workers: Option<usize>,
    pub map_schema: Option<Bound<'py, PyAny>>,
    pub resume: Option<Bound<'py, PyAny>>,
    pub transform: Option<&'a str>,
    pub batches_in_flight: Option<usize>,
    pub equalize: Option<&'a str>,
    pub max_pixels: Option<u64>,
    pub tokenizer: Option<std::path::PathBuf>,
    pub text_field: Option<String>,
    pub add_eos: bool,
    pub add_bos: bool,
    pub pack: Option<usize>,
    pub pack_window: Option<usize>,
    pub pack_policy: Option<&'a str>,
    pub long_docs: Option<&'a str>,
    pub pack_field: Option<String>,
    pub min_pool: Option<usize>,
    pub shuffle_mode: Option<&'a str>,
    pub index_dir: Option<std::path::PathBuf>,
    pub metrics_addr: Option<String>,
    pub autotune: bool,
    pub cpus: Option<usize>,
    pub memory_budget: Option<u64>,
}

/// What the keywords make: the builder of the first start, and what the
/// loader keeps to start again.
pub(crate) struct Translated {
    /// The builder of the first start (the resume included).
    pub builder: LoaderBuilder,
    /// The builder of restarts (`set_epoch`, `load_state_dict`): no resume.
    pub again: LoaderBuilder,
    /// `passes=None`: epochs by iteration, endless.
    pub endless: bool,
    /// The first pass of a resume (else 0).
    pub first_pass: u64,
    /// Started from a resume.
    pub resumed: bool,
    /// The built-in image transform (`transform=`).
    pub image_transform: Option<std::sync::Arc<feedline_vision::ImageTransform>>,
    /// Neither rank nor world size given, and the environment said them.
    pub from_env: bool,
}

impl LoaderKeywords<'_, '_> {
    /// The builder calls these keywords ask for.
    pub(crate) fn translate(self, py: Python<'_>) -> PyResult<Translated> {
        let LoaderKeywords {
            files,
            batch_size,
            shuffle,
            seed,
            passes,
            readers,
            deterministic,
            drop_last,
            rank,
            world_size,
            on_error,
            max_bad,
            schema,
            capacity,
            map,
            workers,
            map_schema,
            resume,
            transform,
            batches_in_flight,
            equalize,
            max_pixels,
            tokenizer,
            text_field,
            add_eos,
            add_bos,
            pack,
            pack_window,
            pack_policy,
            long_docs,
            pack_field,
            min_pool,
            shuffle_mode,
            index_dir,
            metrics_addr,
            autotune,
            cpus,
            memory_budget,
        } = self;
        logbridge::sync_level(py)?;
        let (passes, endless) = passes_arg(passes);
        let mut image_transform = None;
        let mut b = RustLoader::builder()
            .files(file_list(py, files)?)
            .batch(batch_size)
            .shuffle(shuffle)
            .seed(seed)
            .passes(passes)
            .deterministic(deterministic)
            .drop_last(drop_last)
            .equalize(equalize_arg(equalize)?)
            .error_policy(error_policy(on_error, max_bad)?);
        if let Some(r) = readers {
            b = b.readers(r);
        }
        if autotune {
            b = b.autotune(Autotune {
                cpus,
                memory_budget,
            });
        }
        if let Some(s) = schema.filter(|s| !s.is_none()) {
            b = b.schema(schema::parse_schema(py, &s)?);
        }
        if let Some(c) = capacity {
            b = b.capacity(c);
        }
        if let Some(k) = batches_in_flight {
            b = b.batches_in_flight(k);
        }
        let map_schema = match map_schema.filter(|s| !s.is_none()) {
            Some(s) => Some(schema::parse_schema(py, &s)?),
            None => None,
        };
        if let Some(m) = min_pool {
            b = b.min_pool(m);
        }
        if let Some(mode) = shuffle_mode {
            let mode: feedline_actors::ShuffleMode = mode.parse().map_err(|e: String| {
                PyValueError::new_err(format!("shuffle_mode={mode:?}: {e}"))
            })?;
            b = b.shuffle_mode(mode);
        }
        if let Some(dir) = index_dir {
            b = b.index_dir(dir);
        }
        if let Some(addr) = metrics_addr {
            b = b.metrics_addr(addr);
        }
        // What was given, for the settings' check (which holds every rule
        // across settings: this only translates keywords).
        let map = map.filter(|m| !m.is_none());
        let mut given = Given {
            max_bad,
            tokenizer: tokenizer.is_some(),
            map: map.is_some(),
            transform: transform.is_some(),
            max_pixels,
            map_schema: map_schema.is_some(),
            workers,
            text_field: text_field.is_some(),
            add_eos,
            add_bos,
            cpus,
            memory_budget,
            ..Given::default()
        };
        if let Some(p) = pack_arg(
            pack,
            pack_window,
            pack_policy,
            long_docs,
            pack_field,
            &mut given,
        )? {
            b = b.pack(p);
        }
        if let Some(spec) = transform {
            let image =
                feedline_vision::ImageTransform::parse(spec, feedline_vision::ImageFields::Detect)
                    .map_err(|e| PyValueError::new_err(format!("transform={spec:?}: {e}")))?;
            let image = match max_pixels {
                Some(n) if n > 0 => image.max_pixels(n),
                _ => image,
            };
            let image = std::sync::Arc::new(image);
            image_transform = Some(image.clone());
            b = b.transform(image);
        }
        if let Some(f) = map {
            if !f.is_callable() {
                return Err(PyValueError::new_err(format!(
                    "map: expected a callable (instance, rng) -> dict, got {}",
                    f.get_type()
                )));
            }
            if let Some(s) = &map_schema {
                b = b.output_schema(s.clone());
            }
            b = b.transform(std::sync::Arc::new(feedline::transform::map_fn(
                map::python_map(f.unbind(), map_schema),
            )));
        }
        if let Some(path) = tokenizer.filter(|_| !(given.map || given.transform)) {
            let bad = |e: feedline_actors::feedline::tokenize::TokenizeError| {
                PyValueError::new_err(format!("tokenizer={}: {e}", path.display()))
            };
            let field = text_field.as_deref().unwrap_or("text");
            let stage = feedline_actors::Tokenize::new(
                feedline_actors::Tokenizer::from_file(&path).map_err(bad)?,
                field,
            )
            .add_eos(add_eos)
            .map_err(bad)?
            .add_bos(add_bos)
            .map_err(bad)?;
            stage.check().map_err(bad)?;
            b = b.tokenize_with(stage);
        }
        if let Some(w) = workers {
            b = b.workers(w);
        }
        b = b.given(given);
        let from_env = rank.is_none()
            && world_size.is_none()
            && (std::env::var_os("RANK").is_some() || std::env::var_os("WORLD_SIZE").is_some());
        b = match feedline_actors::shard_given(rank, world_size)
            .map_err(|e| PyValueError::new_err(Keywords::say(&e)))?
        {
            Some(shard) => b.shard(shard.rank, shard.world_size),
            None => b.shard_from_env(true),
        };
        // Restarts (set_epoch, load_state_dict) start from the settings
        // without the resume.
        let again = b.clone();
        let mut first_pass = 0;
        let resumed = match resume.filter(|r| !r.is_none()) {
            Some(r) => {
                let cps = checkpoint::resume_list(py, &r)?;
                first_pass = cps.iter().map(|c| c.pass).min().unwrap_or(0);
                for cp in cps {
                    b = b.resume(cp);
                }
                true
            }
            None => false,
        };
        Ok(Translated {
            builder: b,
            again,
            endless,
            first_pass,
            resumed,
            image_transform,
            from_env,
        })
    }
}

/// `files=`: a path (str or path-like) or a sequence of them.
fn file_list(py: Python<'_>, files: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let fspath = py.import("os")?.getattr("fspath")?;
    let one = |f: &Bound<'_, PyAny>| -> PyResult<Option<String>> {
        match fspath.call1((f,)) {
            Ok(p) => p
                .extract::<String>()
                .map(Some)
                .map_err(|_| PyValueError::new_err(format!("files: {f} is not a str path"))),
            Err(_) => Ok(None),
        }
    };
    if let Some(p) = one(files)? {
        return Ok(vec![p]);
    }
    let iter = files.try_iter().map_err(|_| {
        PyValueError::new_err(format!(
            "files: expected a path or a list of paths, got {}",
            files.get_type()
        ))
    })?;
    iter.map(|f| {
        let f = f?;
        one(&f)?.ok_or_else(|| {
            PyValueError::new_err(format!(
                "files: {} is not a path",
                f.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })
    })
    .collect()
}

fn error_policy(on_error: &str, max_bad: Option<u64>) -> PyResult<ErrorPolicy> {
    match on_error {
        "fail" => Ok(ErrorPolicy::Fail),
        "skip" => Ok(ErrorPolicy::Skip {
            max_bad,
            max_bad_fraction: None,
        }),
        other => Err(PyValueError::new_err(format!(
            "on_error: expected \"fail\" or \"skip\", got {other:?}"
        ))),
    }
}

/// `passes=`: None (epochs by iteration, endless) or a number of passes
/// (0 is refused by the settings' check, as every face's is).
fn passes_arg(passes: Option<u64>) -> (u64, bool) {
    match passes {
        None => (feedline_actors::ENDLESS, true),
        Some(n) => (n, false),
    }
}

/// The packing of `pack=` and its settings; the settings given noted in
/// `given` (the settings' check refuses those that do not apply).
fn pack_arg(
    pack: Option<usize>,
    window: Option<usize>,
    policy: Option<&str>,
    long_docs: Option<&str>,
    field: Option<String>,
    given: &mut Given,
) -> PyResult<Option<feedline_actors::Pack>> {
    let policy: Option<feedline_actors::PackPolicy> = policy
        .map(|p| {
            p.parse()
                .map_err(|e: String| PyValueError::new_err(format!("pack_policy: {e}")))
        })
        .transpose()?;
    let long_docs: Option<feedline_actors::LongDocs> = long_docs
        .map(|l| {
            l.parse()
                .map_err(|e: String| PyValueError::new_err(format!("long_docs: {e}")))
        })
        .transpose()?;
    given.pack_policy = policy;
    given.pack_window = window;
    given.long_docs = long_docs;
    given.pack_field = field.is_some();
    let Some(length) = pack else {
        return Ok(None);
    };
    let mut p = feedline_actors::Pack::new(
        policy.unwrap_or(feedline_actors::PackPolicy::BestFit),
        length,
    );
    if let Some(w) = window {
        p = p.window(w);
    }
    if let Some(l) = long_docs {
        p = p.long_docs(l);
    }
    if let Some(f) = field {
        p = p.field(&f);
    }
    // Its values are judged by the settings' check, with the rest.
    Ok(Some(p))
}

/// `equalize=`: None, "drop" or "pad" (with `pack=`, in packed rows).
fn equalize_arg(equalize: Option<&str>) -> PyResult<Equalize> {
    match equalize {
        None | Some("off") => Ok(Equalize::Off),
        Some("drop") => Ok(Equalize::Drop),
        Some("pad") => Ok(Equalize::Pad),
        Some(other) => Err(PyValueError::new_err(format!(
            "equalize: expected \"drop\" (every rank stops at the smallest rank's batches) or \
             \"pad\" (every rank repeats instances up to the largest's), or None, got {other:?}"
        ))),
    }
}

/// Warn (`UserWarning`, and a warning on the `"feedline"` logger) that the
/// shard was taken from `RANK`/`WORLD_SIZE`: a process that meant to read
/// everything would otherwise read a part without a word.
pub(crate) fn warn_env_shard(py: Python<'_>, config: &PipelineConfig) -> PyResult<()> {
    let feedline_actors::Shard { rank, world_size } = config.inputs.shard;
    let env = |n: &str| std::env::var(n).unwrap_or_else(|_| "unset".into());
    let msg = format!(
        "feedline.Loader: rank={rank} and world_size={world_size} were taken from the environment \
         (RANK={}, WORLD_SIZE={}): this loader reads 1/{world_size} of the data ({:.1}%) — \
         pass rank=0, world_size=1 to read all of it, or rank= and world_size= to say so",
        env("RANK"),
        env("WORLD_SIZE"),
        100.0 / world_size as f64,
    );
    py.import("logging")?
        .call_method1("getLogger", ("feedline",))?
        .call_method1("warning", (msg.as_str(),))?;
    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
    PyErr::warn(py, &category, &std::ffi::CString::new(msg)?, 1)
}
