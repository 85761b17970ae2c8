//! The `schema=` argument: a Python dict `{"name": (dtype, shape[, layout])}`
//! turned into a [`feedline::Schema`], and the numpy names of the element
//! types both ways. Dtypes are numpy's names (`"float32"`, `"int64"`,
//! `"uint8"`, `"bool"`, …, or `"bytes"` for byte strings; numpy dtype objects
//! and types, torch's dtypes (`torch.float32`) and names (`"torch.float32"`,
//! `"double"`, `"long"`), and the Rust names such as `"f32"` are accepted
//! too; the ambiguous `"float"` and `"int"` — and the types `float`, `int`
//! — are refused, naming what to write); a shape is a list of
//! non-negative ints whose first entry may be `None` or `-1` (variable
//! length: a ragged field), laid out as `"offsets"` (the default) or
//! `"padded"`. Every mistake is a `ValueError` naming the field.

use feedline::{DType, Dim, Field, Ragged, Schema};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::numpy;

/// The numpy name of an element type.
pub fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I64 => "int64",
        DType::I32 => "int32",
        DType::U8 => "uint8",
        DType::Bool => "bool",
        DType::Bytes => "bytes",
    }
}

/// The element type of a numpy dtype name (or a Rust name such as `f32`).
pub fn dtype_of_name(name: &str) -> Option<DType> {
    Some(match name {
        "float32" | "f32" => DType::F32,
        "float64" | "f64" => DType::F64,
        "int64" | "i64" => DType::I64,
        "int32" | "i32" => DType::I32,
        "uint8" | "u8" => DType::U8,
        "bool" => DType::Bool,
        "bytes" | "bytes_" | "S" => DType::Bytes,
        _ => return None,
    })
}

/// The element type of a torch dtype name (without `torch.`): its
/// canonical names and aliases (`float`/`double`, `long`/`int`, ...).
fn torch_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "float32" | "float" => DType::F32,
        "float64" | "double" => DType::F64,
        "int64" | "long" => DType::I64,
        "int32" | "int" => DType::I32,
        "uint8" => DType::U8,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// `"float"` and `"int"` are refused: numpy reads `"float"` as float64 and
/// `"int"` as int64, torch (`torch.float`, `torch.int`) as float32 and
/// int32 — a model then fails on a Float/Double mismatch far from here.
fn ambiguous(name: &str, dtype: &str) -> PyResult<()> {
    let (a, b) = match dtype {
        "float" => ("float32", "float64"),
        "int" => ("int32", "int64"),
        _ => return Ok(()),
    };
    Err(field_error(
        name,
        format!(
            "dtype {dtype:?} is ambiguous (numpy reads it as {b}, torch as {a}): write \"{a}\" or \"{b}\" \
             (for floats: float32 or float64; for ints: int32 or int64)"
        ),
    ))
}

/// A shape with its element type, in numpy terms: `[?, 3] float32`.
pub fn describe_field(f: &Field) -> String {
    let dims: Vec<String> = f.shape.iter().map(|d| d.to_string()).collect();
    format!("[{}] {}", dims.join(", "), numpy_name(f.dtype))
}

const DTYPES: &str = "float32, float64, int64, int32, uint8, bool, bytes";

fn field_error(name: &str, what: String) -> PyErr {
    PyValueError::new_err(format!("schema field `{name}`: {what}"))
}

/// The element type a Python object names: a string, or anything
/// `numpy.dtype()` takes (`numpy.float32`, `numpy.dtype("int64")`, `bytes`).
fn parse_dtype(py: Python<'_>, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    // torch's dtypes (`torch.float32`, an object whose str() is
    // "torch.float32"), without importing torch.
    let ty = obj.get_type();
    if ty.name()?.to_cow()? == "dtype" && ty.module()?.to_cow()? == "torch" {
        let s = obj.str()?.to_cow()?.into_owned();
        let bare = s.strip_prefix("torch.").unwrap_or(&s);
        return torch_dtype(bare).ok_or_else(|| {
            field_error(
                name,
                format!("dtype {s} is not supported (supported: {DTYPES}, or torch's of them)"),
            )
        });
    }
    if let Ok(s) = obj.downcast::<PyString>() {
        let s = s.to_cow()?;
        ambiguous(name, &s)?;
        if let Some(d) = dtype_of_name(&s) {
            return Ok(d);
        }
        let bare = s.strip_prefix("torch.").unwrap_or(&s);
        if s.starts_with("torch.") || matches!(bare, "double" | "long" | "int16") {
            if let Some(d) = torch_dtype(bare) {
                return Ok(d);
            }
        }
    }
    // The Python types `float` and `int`: numpy reads them as float64 and
    // int64, torch users mean float32 — as ambiguous as the names.
    let builtins = py.import("builtins")?;
    if obj.is(&builtins.getattr("float")?) {
        ambiguous(name, "float")?;
    }
    if obj.is(&builtins.getattr("int")?) {
        ambiguous(name, "int")?;
    }
    let resolved = numpy(py)?
        .call_method1("dtype", (obj,))
        .and_then(|d| d.getattr("name"))
        .and_then(|n| n.extract::<String>());
    match resolved {
        Ok(n) => dtype_of_name(&n).ok_or_else(|| {
            field_error(
                name,
                format!("dtype {n:?} is not supported (supported: {DTYPES})"),
            )
        }),
        Err(_) => Err(field_error(
            name,
            format!(
                "dtype {}: not a dtype (supported: {DTYPES})",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        )),
    }
}

fn parse_shape(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<Dim>> {
    let bad = |why: &str| {
        field_error(
            name,
            format!(
                "shape {}: {why}",
                obj.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        )
    };
    if !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>()) {
        return Err(bad(
            "expected a list of dimensions, such as [64] or [] for a scalar",
        ));
    }
    let mut dims = Vec::new();
    for (i, d) in obj.try_iter()?.enumerate() {
        let d = d?;
        let dim = if d.is_none() {
            Dim::Var
        } else {
            match d.extract::<i64>() {
                Ok(-1) => Dim::Var,
                Ok(n) if n >= 0 => Dim::Fixed(n as usize),
                _ => {
                    return Err(bad(
                        "dimensions are non-negative ints, or None / -1 (variable)",
                    ))
                }
            }
        };
        if dim == Dim::Var && i > 0 {
            return Err(bad("only the first dimension may be variable (None or -1)"));
        }
        dims.push(dim);
    }
    Ok(dims)
}

/// Parse `schema=`: a dict of field name to `(dtype, shape)` or
/// `(dtype, shape, "offsets" | "padded")`.
pub fn parse_schema(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let dict = obj.downcast::<PyDict>().map_err(|_| {
        PyValueError::new_err(
            "schema: expected a dict such as {\"x\": (\"float32\", [64]), \"y\": (\"int64\", [])}",
        )
    })?;
    if dict.is_empty() {
        return Err(PyValueError::new_err(
            "schema: at least one field is needed",
        ));
    }
    let mut fields = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let name: String = k
            .extract()
            .map_err(|_| PyValueError::new_err(format!("schema: field name {k:?} is not a str")))?;
        let spec = v
            .downcast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 2 || t.len() == 3)
            .ok_or_else(|| {
                field_error(
                    &name,
                    format!("expected (dtype, shape) or (dtype, shape, \"offsets\" | \"padded\"), got {v}"),
                )
            })?;
        let dtype = parse_dtype(py, &name, &spec.get_item(0)?)?;
        let shape = parse_shape(&name, &spec.get_item(1)?)?;
        let ragged = if spec.len() == 3 {
            let layout: String = spec.get_item(2)?.extract().map_err(|_| {
                field_error(&name, "layout: expected \"offsets\" or \"padded\"".into())
            })?;
            match layout.as_str() {
                "offsets" => Ragged::Offsets,
                "padded" => Ragged::Padded,
                other => {
                    return Err(field_error(
                        &name,
                        format!("layout {other:?}: expected \"offsets\" or \"padded\""),
                    ))
                }
            }
        } else {
            Ragged::Offsets
        };
        if spec.len() == 3 && shape.first() != Some(&Dim::Var) {
            return Err(field_error(
                &name,
                "a layout is only for a ragged field (first dimension None or -1)".into(),
            ));
        }
        fields.push(Field {
            name,
            dtype,
            shape,
            ragged,
        });
    }
    Schema::new(fields).map_err(|e| PyValueError::new_err(format!("schema: {e}")))
}

/// The schema as the same kind of dict `schema=` takes.
pub fn schema_dict<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for f in schema.fields() {
        let dims: Vec<Option<usize>> = f
            .shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Some(*n),
                Dim::Var => None,
            })
            .collect();
        let shape = PyList::new(py, dims)?;
        let v = if f.is_ragged() {
            let layout = match f.ragged {
                Ragged::Offsets => "offsets",
                Ragged::Padded => "padded",
            };
            (numpy_name(f.dtype), shape, layout)
                .into_pyobject(py)?
                .into_any()
        } else {
            (numpy_name(f.dtype), shape).into_pyobject(py)?.into_any()
        };
        d.set_item(&f.name, v)?;
    }
    Ok(d)
}
