//! The batcher: groups rows, in the order they come, into batches of a fixed
//! number of instances or under a cost budget (e.g. tokens per batch).
//!
//! - [`BatchPolicy::Fixed`]`(n)`: a batch is complete at `n` rows.
//! - [`BatchPolicy::Budget`]: rows join the open batch while the sum of
//!   their costs stays within `max_cost`; a row that does not fit closes the
//!   batch and opens the next, and a batch whose cost reaches `max_cost` is
//!   complete at once. A single row that costs more than the budget forms a
//!   batch alone (it is counted in [`Batcher::oversize_batches`] and reported
//!   with one `log::warn!` per pass). So every batch's cost is within the
//!   budget except such a lone row's.
//!
//! At the end of a pass [`Batcher::flush`] hands over the last, partial batch,
//! or drops it (counting its rows) when `drop_last` is set. With a budget, the
//! last batch is partial unless its cost reached `max_cost`.
//!
//! ```
//! use feedline::batch_policy::{BatchPolicy, Batcher};
//! # use std::sync::Arc;
//! # use feedline::{Chunk, DType, Instance, Origin, RowRef, Schema, SourceId, Values};
//! # let schema = Schema::builder().field("x", DType::I64, []).build().unwrap();
//! # let mut chunk = Chunk::new(&schema);
//! # for i in 0..5 {
//! #     let o = Origin::new(SourceId::intern("mem"), i);
//! #     chunk.push_instance(&Instance::new(&schema, vec![Values::I64(vec![0])], o).unwrap());
//! # }
//! # let chunk = Arc::new(chunk);
//! let mut b = Batcher::new(BatchPolicy::Fixed(2), true).unwrap();
//! let batches: Vec<_> = (0..5).filter_map(|i| b.push(RowRef::new(chunk.clone(), i))).collect();
//! assert_eq!(batches.len(), 2);
//! assert!(b.flush().is_none()); // the fifth row: a partial batch, dropped
//! assert_eq!(b.dropped_rows(), 1);
//! ```

use std::sync::Arc;

use crate::chunk::{Chunk, RowRef};
use crate::error::{Error, Result};
use crate::schema::Schema;

/// The cost of row `i` of a chunk (e.g. its number of tokens).
pub type CostFn = Arc<dyn Fn(&Chunk, usize) -> u64 + Send + Sync>;

/// How rows are grouped into batches.
#[derive(Clone)]
pub enum BatchPolicy {
    /// A fixed number of instances per batch (≥ 1).
    Fixed(usize),
    /// As many instances as fit in a cost budget.
    Budget {
        /// Largest total cost of a batch (≥ 1).
        max_cost: u64,
        /// Cost of one instance.
        cost: CostFn,
    },
}

impl std::fmt::Debug for BatchPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchPolicy::Fixed(n) => write!(f, "Fixed({n})"),
            BatchPolicy::Budget { max_cost, .. } => write!(f, "Budget {{ max_cost: {max_cost} }}"),
        }
    }
}

impl BatchPolicy {
    /// A token budget: the cost of an instance is the length (leading
    /// dimension) of its ragged field `field`.
    ///
    /// Errors if `schema` has no such field, if it is not ragged, or if
    /// `max_tokens` is 0.
    pub fn tokens(field: &str, max_tokens: u64, schema: &Schema) -> Result<Self> {
        let fi = schema.index_of(field).ok_or_else(|| {
            Error::Config(format!("token budget: the schema has no field `{field}`"))
        })?;
        let f = &schema.fields()[fi];
        if !f.is_ragged() {
            return Err(Error::Config(format!(
                "token budget: field `{field}` ({}) is not ragged; use a fixed batch size",
                f.describe()
            )));
        }
        if max_tokens == 0 {
            return Err(Error::Config(
                "token budget: max_tokens must be at least 1".into(),
            ));
        }
        let unit = f.unit_elements().max(1);
        // Chunks given to one batcher share its schema, so the field index is fixed.
        let cost: CostFn = Arc::new(move |chunk: &Chunk, i: usize| {
            chunk
                .columns()
                .get(fi)
                .map_or(0, |col| (col.range(i).len() / unit) as u64)
        });
        Ok(BatchPolicy::Budget {
            max_cost: max_tokens,
            cost,
        })
    }

    /// Check the policy's numbers.
    pub fn validate(&self) -> Result<()> {
        match self {
            BatchPolicy::Fixed(0) => Err(Error::Config("batch size must be at least 1".into())),
            BatchPolicy::Budget { max_cost: 0, .. } => {
                Err(Error::Config("batch cost budget must be at least 1".into()))
            }
            _ => Ok(()),
        }
    }

    /// The cost of `row` under this policy (1 for a fixed size).
    pub fn cost_of(&self, row: &RowRef) -> u64 {
        match self {
            BatchPolicy::Fixed(_) => 1,
            BatchPolicy::Budget { cost, .. } => cost(&row.chunk, row.index),
        }
    }
}

/// Groups rows into batches; see the [module docs](self).
#[derive(Debug)]
pub struct Batcher {
    policy: BatchPolicy,
    drop_last: bool,
    open: Vec<RowRef>,
    open_cost: u64,
    dropped_rows: u64,
    oversize: u64,
    batches: u64,
    warned_this_pass: bool,
}

impl Batcher {
    /// A batcher; an error for a batch size or budget of 0.
    pub fn new(policy: BatchPolicy, drop_last: bool) -> Result<Self> {
        policy.validate()?;
        let cap = match policy {
            BatchPolicy::Fixed(n) => n.min(1 << 16),
            BatchPolicy::Budget { .. } => 64,
        };
        Ok(Batcher {
            policy,
            drop_last,
            open: Vec::with_capacity(cap),
            open_cost: 0,
            dropped_rows: 0,
            oversize: 0,
            batches: 0,
            warned_this_pass: false,
        })
    }

    /// The policy.
    pub fn policy(&self) -> &BatchPolicy {
        &self.policy
    }

    /// Add a row; returns a batch's rows when one is complete.
    ///
    /// With a budget, a row that does not fit completes the open batch (which
    /// is returned) and opens the next. When that row alone is over the
    /// budget it then forms a complete batch too, which is returned by the
    /// next `push` or `flush`.
    pub fn push(&mut self, row: RowRef) -> Option<Vec<RowRef>> {
        match self.policy {
            BatchPolicy::Fixed(n) => {
                self.open.push(row);
                if self.open.len() >= n {
                    return Some(self.take());
                }
                None
            }
            BatchPolicy::Budget { max_cost, ref cost } => {
                let c = cost(&row.chunk, row.index);
                let mut out = None;
                if !self.open.is_empty()
                    && (self.open_cost >= max_cost || self.open_cost.saturating_add(c) > max_cost)
                {
                    out = Some(self.take());
                }
                if self.open.is_empty() && c > max_cost {
                    self.oversize += 1;
                    if !self.warned_this_pass {
                        self.warned_this_pass = true;
                        log::warn!(
                            "batcher: instance {} costs {c}, more than the batch budget {max_cost}; \
                             it forms a batch alone (further ones this pass are only counted)",
                            row.origin().location()
                        );
                    }
                }
                self.open.push(row);
                self.open_cost = self.open_cost.saturating_add(c);
                if out.is_none() && self.open_cost >= max_cost {
                    out = Some(self.take());
                }
                out
            }
        }
    }

    fn take(&mut self) -> Vec<RowRef> {
        self.batches += 1;
        self.open_cost = 0;
        let cap = self.open.capacity();
        std::mem::replace(&mut self.open, Vec::with_capacity(cap))
    }

    /// End of pass: the open batch, if any — or, with `drop_last`, `None` if
    /// it is partial (its rows are counted in
    /// [`dropped_rows`](Self::dropped_rows)). Resets the once-per-pass warning.
    pub fn flush(&mut self) -> Option<Vec<RowRef>> {
        self.warned_this_pass = false;
        if self.open.is_empty() {
            return None;
        }
        let complete = match self.policy {
            BatchPolicy::Fixed(n) => self.open.len() >= n,
            BatchPolicy::Budget { max_cost, .. } => self.open_cost >= max_cost,
        };
        if self.drop_last && !complete {
            self.dropped_rows += self.open.len() as u64;
            self.open.clear();
            self.open_cost = 0;
            return None;
        }
        Some(self.take())
    }

    /// Rows in the open batch.
    pub fn pending(&self) -> usize {
        self.open.len()
    }

    /// Rows dropped by `flush` with `drop_last`, over all passes.
    pub fn dropped_rows(&self) -> u64 {
        self.dropped_rows
    }

    /// Batches made of a single row over the budget, over all passes.
    pub fn oversize_batches(&self) -> u64 {
        self.oversize
    }

    /// Batches handed out, over all passes.
    pub fn batches(&self) -> u64 {
        self.batches
    }
}
