//! The `--transform` spec: presets, spelled-out chains, the plan's dtype
//! and shape, the canonical form parsing back to the same plan, and a clear
//! positioned message for every kind of mistake.

use feedline_vision::{Dtype, GeomOp, Layout, Normalize, OutputShape, Plan, ResizeTo, PRESETS};

#[test]
fn presets_and_their_outputs() {
    let decode = Plan::parse("decode").unwrap();
    assert_eq!(decode.dtype(), Dtype::U8);
    assert_eq!(decode.shape(), OutputShape::Variable(Layout::Hwc));
    assert!(decode.geometry().is_empty());

    let train = Plan::parse("imagenet-train").unwrap();
    assert_eq!(train.dtype(), Dtype::F32);
    assert_eq!(train.shape(), OutputShape::Fixed([3, 224, 224]));
    assert_eq!(train.format().normalize, Some(Normalize::IMAGENET));
    match train.geometry() {
        [GeomOp::RandomResizedCrop {
            height: 224,
            width: 224,
            params,
        }, GeomOp::Flip { p }] => {
            assert_eq!(params.scale, (0.08, 1.0));
            assert_eq!(params.ratio, (0.75, 4.0 / 3.0));
            assert_eq!(*p, 0.5);
        }
        other => panic!("{other:?}"),
    }
    let spelled = Plan::parse("decode,random-resized-crop(224,scale=0.08:1,ratio=0.75:1.3333333333333333),flip(0.5),normalize(imagenet),chw").unwrap();
    assert_eq!(spelled, train);

    let eval = Plan::parse("imagenet-eval").unwrap();
    assert_eq!(eval.shape(), OutputShape::Fixed([3, 224, 224]));
    assert_eq!(
        eval.geometry(),
        &[
            GeomOp::Resize(ResizeTo::Shorter(256)),
            GeomOp::CenterCrop {
                height: 224,
                width: 224
            }
        ]
    );
    for (name, chain) in PRESETS {
        assert_eq!(
            Plan::parse(name).unwrap(),
            Plan::parse(chain).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn chains_dtypes_and_shapes() {
    let cases: [(&str, Dtype, OutputShape); 9] = [
        ("decode,chw", Dtype::U8, OutputShape::Variable(Layout::Chw)),
        (
            "decode,to-f32",
            Dtype::F32,
            OutputShape::Variable(Layout::Hwc),
        ),
        (
            "decode,resize(256)",
            Dtype::U8,
            OutputShape::Variable(Layout::Hwc),
        ),
        (
            "decode,resize(256),center-crop(224),to-f32,normalize(imagenet),chw",
            Dtype::F32,
            OutputShape::Fixed([3, 224, 224]),
        ),
        (
            "decode, resize( 120x160 ) ,flip",
            Dtype::U8,
            OutputShape::Fixed([120, 160, 3]),
        ),
        (
            "decode,center-crop(10x20),resize(30)",
            Dtype::U8,
            OutputShape::Variable(Layout::Hwc),
        ),
        (
            "decode,rrc(64x32,ratio=0.5:2),hwc",
            Dtype::U8,
            OutputShape::Fixed([64, 32, 3]),
        ),
        (
            "decode,normalize(mean=0.5:0.5:0.5,std=0.25:0.25:0.25)",
            Dtype::F32,
            OutputShape::Variable(Layout::Hwc),
        ),
        (
            "decode,flip(1),flip(0),normalize(mean=0.5,std=2),chw",
            Dtype::F32,
            OutputShape::Variable(Layout::Chw),
        ),
    ];
    for (spec, dtype, shape) in cases {
        let plan = Plan::parse(spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.dtype(), dtype, "{spec}");
        assert_eq!(plan.shape(), shape, "{spec}");
        // The canonical form parses back to the same plan.
        let canonical = plan.to_string();
        assert_eq!(
            Plan::parse(&canonical).unwrap(),
            plan,
            "{spec} -> {canonical}"
        );
    }
}

#[test]
fn every_mistake_says_where_and_what() {
    // (spec, column, words the message must contain)
    let cases: &[(&str, usize, &[&str])] = &[
        ("", 1, &["empty spec", "imagenet-train"]),
        ("   ", 1, &["empty spec"]),
        ("resize(256)", 1, &["starts with 'decode'", "'resize'"]),
        (
            "decode,resize(256",
            18,
            &["expected ',' or ')'", "end of the spec"],
        ),
        (
            "decode,resize(256))",
            19,
            &["expected ',' and the next step"],
        ),
        ("decode,,flip", 8, &["expected a step name", "','"]),
        (
            "decode,flop",
            8,
            &["unknown step 'flop'", "random-resized-crop"],
        ),
        ("decode,imagenet-train", 8, &["is a preset"]),
        ("decode,decode", 8, &["'decode' appears twice"]),
        ("decode(1)", 8, &["takes no arguments"]),
        ("decode,resize", 14, &["needs a size"]),
        ("decode,resize()", 15, &["needs a size"]),
        ("decode,resize(0)", 15, &["whole number in 1..=65535", "0"]),
        ("decode,resize(2.5)", 15, &["whole number"]),
        ("decode,resize(256x)", 19, &["expected the width after 'x'"]),
        ("decode,resize(256,300)", 19, &["at most 1 positional"]),
        ("decode,resize(size=3)", 15, &["no argument 'size'", "none"]),
        ("decode,center-crop(a)", 20, &["expected N or HxW", "'a'"]),
        ("decode,random-resized-crop", 27, &["needs its output size"]),
        (
            "decode,rrc(224,scale=0.5)",
            16,
            &["scale: expected LO:HI", "0.5"],
        ),
        (
            "decode,rrc(224,scale=0.9:0.1)",
            8,
            &["scale 0.9:0.1", "min <= max"],
        ),
        (
            "decode,rrc(224,ratio=1:2:3)",
            16,
            &["ratio: expected LO:HI"],
        ),
        (
            "decode,rrc(224,scale=0.1:1,scale=0.2:1)",
            28,
            &["'scale' given twice"],
        ),
        (
            "decode,rrc(scale=0.1:1,224)",
            24,
            &["positional argument after a keyword"],
        ),
        (
            "decode,rrc(224,zoom=2)",
            16,
            &["no argument 'zoom'", "scale, ratio"],
        ),
        ("decode,flip(1.5)", 13, &["probability in [0, 1]", "1.5"]),
        ("decode,flip(x)", 13, &["probability", "'x'"]),
        ("decode,normalize", 17, &["needs 'imagenet'"]),
        (
            "decode,normalize(cifar)",
            18,
            &["expected 'imagenet'", "'cifar'"],
        ),
        (
            "decode,normalize(mean=0.5:0.5:0.5)",
            8,
            &["both mean=", "std="],
        ),
        (
            "decode,normalize(mean=0.5,std=0:1:1)",
            8,
            &["std must be finite and > 0"],
        ),
        (
            "decode,normalize(mean=1:2,std=1)",
            18,
            &["mean: expected R:G:B"],
        ),
        (
            "decode,normalize(imagenet,mean=1)",
            18,
            &["either 'imagenet' or mean="],
        ),
        (
            "decode,normalize(imagenet),normalize(imagenet)",
            28,
            &["'normalize' appears twice"],
        ),
        ("decode,to-f32,to-f32", 15, &["'to-f32' appears twice"]),
        ("decode,chw,hwc", 12, &["layout", "given twice"]),
        (
            "decode,chw,resize(10)",
            12,
            &[
                "comes after the output step 'chw'",
                "geometric steps come first",
            ],
        ),
        (
            "decode,to-f32,flip",
            15,
            &["after the output step 'to-f32'"],
        ),
        ("decode,resize(1e99)", 15, &["whole number"]),
        ("decode;flip", 7, &["unexpected character ';'"]),
        ("decode,resize(--3)", 15, &["'-' is not a number"]),
        ("decode,resize(256 256)", 19, &["expected ',' or ')'"]),
    ];
    let mut wrong = Vec::new();
    for (spec, column, words) in cases {
        let err = Plan::parse(spec).expect_err(spec);
        assert_eq!(err.spec, *spec);
        let text = err.to_string();
        // The caret line points at the column.
        let caret = text.lines().last().unwrap().find('^');
        if err.column != *column
            || caret != Some(column + 1)
            || !words.iter().all(|w| text.contains(w))
        {
            wrong.push(format!(
                "{spec:?} (expected column {column}, words {words:?}):\n{text}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}
