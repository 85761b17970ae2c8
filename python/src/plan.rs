//! The planning `feedline.ray` takes from the native code, so that a Ray
//! `Service` or `read()` reads what a `feedline.Loader` given the same
//! inputs reads:
//!
//! - `_expand_inputs`: what the user typed (paths, URLs, globs, brace
//!   ranges, `@list` files, `FORMAT:` prefixes, kept on every result) into
//!   file specs, by the Loader's own `feedline::plan::expand_inputs`, its
//!   errors raised as the Loader raises them (same type, same message);
//! - `_group_plan`: the groups of one pass of a Ray `Service`
//!   (`feedline_actors::group_plan`: each rank an equal share of the
//!   pass's records, cut into groups, each group a list of parts, each part
//!   one `feedline.Loader`), its file order the Loader's own permutation of
//!   `(seed, pass)` (`PassPlan::order`).
//!
//! - `_shard`: the shard `feedline.Loader(rank=, world_size=)` takes
//!   (`feedline_actors::shard_given`), for `feedline.torch.IterableDataset`,
//!   which splits it again between its workers.
//!
//! `feedline.ray` (`python/pysrc/feedline/ray.py`) only translates these
//! to and from its own values (lists of str, dicts of parts).

use feedline_actors::{group_plan, PipelineError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyModule;

/// Add this module's functions to the native module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_expand_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(_group_plan, m)?)?;
    m.add_function(wrap_pyfunction!(_shard, m)?)?;
    Ok(())
}

/// `inputs` expanded into file specs as `feedline.Loader(files=inputs)`
/// expands them (remote globs listed with the GIL released); a mistake
/// raises what the Loader raises for it (a glob matching nothing, a list
/// file that is not there, a file given twice: ValueError or
/// FileNotFoundError, the Loader's message).
#[pyfunction]
#[pyo3(signature = (inputs))]
pub fn _expand_inputs(py: Python<'_>, inputs: Vec<String>) -> PyResult<Vec<String>> {
    if inputs.is_empty() {
        // The Loader refuses an empty list in its settings' check, before
        // it expands anything: that check's own refusal.
        let none = feedline_actors::PipelineConfig::default();
        if let Err(e) = none.check() {
            return Err(crate::start_err(e));
        }
    }
    py.allow_threads(|| feedline::plan::expand_inputs(&inputs))
        .map_err(|e| crate::start_err(PipelineError::from(e)))
}

/// One part as `_group_plan` hands it to Python.
type PyPart = (Vec<usize>, u64, u64, Vec<Option<(u64, u64)>>, u64);

/// `feedline_actors::group_plan` for `feedline.ray`: `(groups, records,
/// by_record)`, each group a list of parts `(ids, shard, shards, ranges,
/// seed)`. A ValueError for groups fewer than ranks.
#[pyfunction]
#[pyo3(signature = (counts, seed, pass_, groups, world_size, shuffle))]
pub fn _group_plan(
    counts: Vec<u64>,
    seed: u64,
    pass_: u64,
    groups: usize,
    world_size: usize,
    shuffle: bool,
) -> PyResult<(Vec<Vec<PyPart>>, Vec<u64>, bool)> {
    let plan = group_plan(&counts, seed, pass_, groups, world_size, shuffle)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let groups = plan
        .groups
        .into_iter()
        .map(|parts| {
            parts
                .into_iter()
                .map(|p| (p.ids, p.shard, p.shards, p.ranges, p.seed))
                .collect()
        })
        .collect();
    Ok((groups, plan.records, plan.by_record))
}

/// `(rank, world_size, from_env)`: the shard `feedline.Loader(rank=rank,
/// world_size=world_size)` reads (each one not given from `RANK` /
/// `WORLD_SIZE`, else 0 / 1: `feedline_actors::shard_given`), and whether
/// neither was given and the environment said it. Refused as the Loader
/// refuses it (ValueError, the same sentence).
#[pyfunction]
#[pyo3(signature = (rank=None, world_size=None))]
pub fn _shard(rank: Option<usize>, world_size: Option<usize>) -> PyResult<(usize, usize, bool)> {
    let shard = feedline_actors::shard_given(rank, world_size)
        .map_err(|e| PyValueError::new_err(crate::Keywords::say(&e)))?;
    let from_env = shard.is_some() && rank.is_none() && world_size.is_none();
    let shard = shard.unwrap_or_default();
    Ok((shard.rank, shard.world_size, from_env))
}
