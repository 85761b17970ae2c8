//! Builds the C shim around libjpeg-turbo (`csrc/jpeg_shim.c`) and links the
//! system libjpeg-turbo (Debian: `apt-get install -y libjpeg62-turbo-dev`).
//!
//! `JPEG_INCLUDE_DIR` / `JPEG_LIB_DIR` point at another installation.

fn main() {
    println!("cargo:rerun-if-changed=csrc/jpeg_shim.c");
    println!("cargo:rerun-if-env-changed=JPEG_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=JPEG_LIB_DIR");
    let mut build = cc::Build::new();
    build
        .file("csrc/jpeg_shim.c")
        .warnings(true)
        .extra_warnings(true)
        .opt_level(2);
    if let Ok(dir) = std::env::var("JPEG_INCLUDE_DIR") {
        build.include(dir);
    }
    if let Err(error) = build.try_compile("feedline_jpeg_shim") {
        panic!(
            "feedline-vision: could not compile its libjpeg-turbo shim ({error}).\n\
             It needs libjpeg-turbo's headers (jpeglib.h, version >= 2.0): on Debian or Ubuntu \
             `apt-get install -y libjpeg62-turbo-dev`; elsewhere set JPEG_INCLUDE_DIR and JPEG_LIB_DIR."
        );
    }
    if let Ok(dir) = std::env::var("JPEG_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=jpeg");
}
