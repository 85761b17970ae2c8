/*
 * feedline-vision's shim around libjpeg-turbo: every libjpeg call is made
 * from a C function that set a setjmp point first, and the error manager
 * longjmps back to it (libjpeg's default error handler calls exit(), and
 * setjmp/longjmp cannot cross Rust frames).  Nothing here calls into Rust,
 * so no Rust frame is ever skipped by a longjmp.
 *
 * Warnings that mean the pixels are wrong (truncated data, bad Huffman
 * code, premature end of a data segment, ...) are errors too: libjpeg would
 * otherwise fill the rest of the image with grey and report success.
 * Warnings that leave the pixels intact (extraneous bytes between markers,
 * an unknown JFIF revision or Adobe transform code, a bad ICC marker) are
 * counted and ignored.
 *
 * A scan limit (as libjpeg-turbo's `djpeg -maxscans` sets it, through a
 * progress monitor): a progressive JPEG of thousands of scans makes libjpeg
 * run over every coefficient once per scan, seconds of CPU for one small
 * file; past the limit the decode fails naming the scan count and the
 * limit.
 *
 * CMYK and YCCK files are converted to RGB here, row by row, as PIL
 * converts them (so no CMYK copy of the image is ever held).
 *
 * Use: fl_jpeg_new, then per image fl_jpeg_read_header then (optionally)
 * fl_jpeg_decode; fl_jpeg_free at the end.  A decoder is used by one thread
 * at a time.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 2000000
#error "feedline-vision needs libjpeg-turbo >= 2.0 (jpeg_skip_scanlines, jpeg_crop_scanline, jpeg_mem_src)"
#endif

#define FL_OK 0
#define FL_JPEG_ERROR 1
#define FL_BAD_REQUEST 2
#define FL_OUT_OF_MEMORY 3

#define FL_SKIP_ROWS 1u  /* jpeg_skip_scanlines for the rows above the region */
#define FL_CROP_COLS 2u  /* jpeg_crop_scanline to the region's columns */
#define FL_STOP_EARLY 4u /* stop after the region's last row (no trailing-data check) */

/* Pixels kept on each side of a column crop, so that the region's edge
 * columns are upsampled from their real neighbours (fancy upsampling looks
 * one chroma sample to each side). */
#define FL_COL_MARGIN 2u
/* Rows read (and dropped) above the region after a skip. */
#define FL_ROW_MARGIN 0u
/* Rows read per jpeg_read_scanlines call. */
#define FL_ROWS_PER_READ 16

typedef struct fl_jpeg_info {
  uint32_t width;
  uint32_t height;
  int32_t components;
  int32_t color_space; /* J_COLOR_SPACE of the file */
  int32_t progressive;
  int32_t precision;
  int32_t saw_adobe_marker;
  int32_t adobe_transform;
  int32_t h_samp[4];
  int32_t v_samp[4];
} fl_jpeg_info;

typedef struct fl_jpeg_region {
  uint32_t scale_denom; /* 1, 2, 4 or 8 */
  uint32_t x, y, width, height; /* in scaled output pixels */
  uint32_t flags;      /* FL_SKIP_ROWS | FL_CROP_COLS | FL_STOP_EARLY */
  int32_t cmyk;        /* 1: a CMYK/YCCK file, decoded as CMYK and converted
                          to RGB here as PIL does; 0: decoded as RGB */
  uint8_t *out;        /* height rows of width * 3 bytes (RGB) */
  size_t out_stride;   /* bytes from one output row to the next */
  size_t out_len;      /* bytes writable at out */
} fl_jpeg_region;

struct fl_error_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int benign_warnings;
  size_t input_len;    /* bytes given to jpeg_mem_src */
  size_t error_offset; /* bytes the source had handed out at the last error */
};

typedef struct fl_jpeg {
  struct jpeg_decompress_struct cinfo; /* first: the progress monitor casts */
  struct fl_error_mgr err;
  struct jpeg_progress_mgr progress;
  int max_scans;       /* 0: no limit */
  int header_read;
  uint8_t *scratch;
  size_t scratch_len;
} fl_jpeg;

static void fl_note_offset(j_common_ptr cinfo) {
  struct fl_error_mgr *err = (struct fl_error_mgr *)cinfo->err;
  err->error_offset = 0;
  if (cinfo->is_decompressor) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->src && d->src->bytes_in_buffer <= err->input_len)
      err->error_offset = err->input_len - d->src->bytes_in_buffer;
  }
}

static void fl_error_exit(j_common_ptr cinfo) {
  struct fl_error_mgr *err = (struct fl_error_mgr *)cinfo->err;
  fl_note_offset(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

static int fl_warning_is_benign(int code) {
  return code == JWRN_EXTRANEOUS_DATA || code == JWRN_ADOBE_XFORM ||
         code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC;
}

static void fl_emit_message(j_common_ptr cinfo, int msg_level) {
  struct fl_error_mgr *err = (struct fl_error_mgr *)cinfo->err;
  if (msg_level >= 0) return; /* trace messages */
  if (fl_warning_is_benign(err->pub.msg_code)) {
    err->benign_warnings++;
    return;
  }
  fl_note_offset(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

static void fl_output_message(j_common_ptr cinfo) { (void)cinfo; }

/* libjpeg calls this before each chunk of input it consumes (every iMCU row
 * and every new scan while jpeg_start_decompress reads a multi-scan file):
 * past the scan limit the decode stops here, as djpeg -maxscans does. */
static void fl_progress_monitor(j_common_ptr cinfo) {
  fl_jpeg *j = (fl_jpeg *)cinfo; /* cinfo is fl_jpeg's first member */
  j_decompress_ptr d = (j_decompress_ptr)cinfo;
  if (j->max_scans > 0 && d->input_scan_number > j->max_scans) {
    fl_note_offset(cinfo);
    snprintf(j->err.message, sizeof j->err.message,
             "%s JPEG of more than %d scans: scan %d reached, over the scan limit of %d "
             "(libjpeg-turbo's -maxscans; many scans cost seconds of CPU for one image)",
             d->progressive_mode ? "progressive" : "multi-scan", j->max_scans,
             d->input_scan_number, j->max_scans);
    longjmp(j->err.jump, 1);
  }
}

static void fl_set_message(fl_jpeg *j, const char *message) {
  snprintf(j->err.message, sizeof j->err.message, "%s", message);
}

static int fl_create(fl_jpeg *j) {
  j->cinfo.err = jpeg_std_error(&j->err.pub);
  j->err.pub.error_exit = fl_error_exit;
  j->err.pub.emit_message = fl_emit_message;
  j->err.pub.output_message = fl_output_message;
  if (setjmp(j->err.jump)) return FL_JPEG_ERROR;
  jpeg_create_decompress(&j->cinfo);
  j->progress.progress_monitor = fl_progress_monitor;
  j->cinfo.progress = &j->progress;
  return FL_OK;
}

fl_jpeg *fl_jpeg_new(void) {
  fl_jpeg *j = (fl_jpeg *)calloc(1, sizeof(fl_jpeg));
  if (!j) return NULL;
  if (fl_create(j) != FL_OK) {
    free(j);
    return NULL;
  }
  return j;
}

void fl_jpeg_free(fl_jpeg *j) {
  if (!j) return;
  jpeg_destroy_decompress(&j->cinfo);
  free(j->scratch);
  free(j);
}

const char *fl_jpeg_message(const fl_jpeg *j) { return j->err.message; }

int fl_jpeg_benign_warnings(const fl_jpeg *j) { return j->err.benign_warnings; }

size_t fl_jpeg_input_offset(const fl_jpeg *j) { return j->err.error_offset; }

/* The most scans a file may have (0: no limit). */
void fl_jpeg_set_max_scans(fl_jpeg *j, int max_scans) { j->max_scans = max_scans; }

/* Caps libjpeg's own allocations (the progressive coefficient buffers above
 * all); over it libjpeg fails with "Backing store not supported". */
void fl_jpeg_set_max_memory(fl_jpeg *j, long bytes) {
  j->cinfo.mem->max_memory_to_use = bytes;
}

int fl_jpeg_read_header(fl_jpeg *j, const uint8_t *data, size_t len,
                        fl_jpeg_info *info) {
  int c;
  if (j->header_read) {
    jpeg_abort_decompress(&j->cinfo);
    j->header_read = 0;
  }
  j->err.message[0] = 0;
  j->err.benign_warnings = 0;
  j->err.input_len = len;
  j->err.error_offset = 0;
  if (setjmp(j->err.jump)) {
    jpeg_abort_decompress(&j->cinfo);
    j->header_read = 0;
    return FL_JPEG_ERROR;
  }
  jpeg_mem_src(&j->cinfo, data, (unsigned long)len);
  jpeg_read_header(&j->cinfo, TRUE);
  j->header_read = 1;
  memset(info, 0, sizeof *info);
  info->width = j->cinfo.image_width;
  info->height = j->cinfo.image_height;
  info->components = j->cinfo.num_components;
  info->color_space = (int32_t)j->cinfo.jpeg_color_space;
  info->progressive = j->cinfo.progressive_mode ? 1 : 0;
  info->precision = j->cinfo.data_precision;
  info->saw_adobe_marker = j->cinfo.saw_Adobe_marker ? 1 : 0;
  info->adobe_transform = j->cinfo.Adobe_transform;
  for (c = 0; c < j->cinfo.num_components && c < 4; c++) {
    info->h_samp[c] = j->cinfo.comp_info[c].h_samp_factor;
    info->v_samp[c] = j->cinfo.comp_info[c].v_samp_factor;
  }
  return FL_OK;
}

/* PIL's conversion of a CMYK JPEG: PIL reads every 4-component JPEG with
 * the Adobe (inverted) convention (rawmode "CMYK;I": C = 255 - c for a
 * stored byte c), then convert("RGB") computes per channel
 * R = nk - MULDIV255(C, nk) with nk = 255 - K (Pillow's cmyk2rgb); with the
 * stored bytes that is k - MULDIV255(255 - c, k). */
static void fl_cmyk_to_rgb(const JSAMPLE *cmyk, uint8_t *rgb, JDIMENSION pixels) {
  JDIMENSION i;
  int c;
  for (i = 0; i < pixels; i++, cmyk += 4, rgb += 3) {
    unsigned nk = cmyk[3];
    for (c = 0; c < 3; c++) {
      unsigned tmp = (255u - cmyk[c]) * nk + 128u;
      rgb[c] = (uint8_t)(nk - (((tmp >> 8) + tmp) >> 8));
    }
  }
}

static int fl_reserve_scratch(fl_jpeg *j, size_t len) {
  if (j->scratch_len >= len) return 1;
  free(j->scratch);
  j->scratch = (uint8_t *)malloc(len);
  j->scratch_len = j->scratch ? len : 0;
  return j->scratch != NULL;
}

/* Decodes the region of the image whose header fl_jpeg_read_header read
 * last.  The object is ready for the next fl_jpeg_read_header afterwards,
 * whatever the outcome. */
int fl_jpeg_decode(fl_jpeg *j, const fl_jpeg_region *r) {
  struct jpeg_decompress_struct *cinfo = &j->cinfo;
  JDIMENSION xoff, crop_w, col, first_row, out_w, out_h, n, i;
  size_t comps, row_bytes, in_row_bytes;
  JSAMPROW rows[FL_ROWS_PER_READ];

  if (!j->header_read) {
    fl_set_message(j, "no JPEG header was read before the decode");
    return FL_BAD_REQUEST;
  }
  if (setjmp(j->err.jump)) {
    jpeg_abort_decompress(cinfo);
    j->header_read = 0;
    return FL_JPEG_ERROR;
  }
  if (r->scale_denom != 1 && r->scale_denom != 2 && r->scale_denom != 4 &&
      r->scale_denom != 8) {
    fl_set_message(j, "DCT scale denominator is not 1, 2, 4 or 8");
    jpeg_abort_decompress(cinfo);
    j->header_read = 0;
    return FL_BAD_REQUEST;
  }
  cinfo->scale_num = 1;
  cinfo->scale_denom = r->scale_denom;
  cinfo->out_color_space = r->cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  jpeg_start_decompress(cinfo);
  j->header_read = 0; /* from here on the object is aborted on every way out */
  out_w = cinfo->output_width;
  out_h = cinfo->output_height;
  comps = (size_t)cinfo->output_components;
  if (r->width == 0 || r->height == 0 || r->x > out_w || r->width > out_w - r->x ||
      r->y > out_h || r->height > out_h - r->y) {
    snprintf(j->err.message, sizeof j->err.message,
             "region %ux%u at (%u, %u) is not inside the %ux%u decoded image",
             r->width, r->height, r->x, r->y, out_w, out_h);
    jpeg_abort_decompress(cinfo);
    return FL_BAD_REQUEST;
  }
  if (comps != (r->cmyk ? 4u : 3u)) {
    fl_set_message(j, "libjpeg's output is not the components asked for");
    jpeg_abort_decompress(cinfo);
    return FL_BAD_REQUEST;
  }
  in_row_bytes = (size_t)r->width * comps;
  row_bytes = (size_t)r->width * 3;
  if (r->out_stride < row_bytes ||
      r->out_len < (size_t)(r->height - 1) * r->out_stride + row_bytes) {
    fl_set_message(j, "output buffer too small for the region");
    jpeg_abort_decompress(cinfo);
    return FL_BAD_REQUEST;
  }

  xoff = 0;
  crop_w = out_w;
  if ((r->flags & FL_CROP_COLS) && (r->x > 0 || r->width < out_w)) {
    JDIMENSION lo = r->x > FL_COL_MARGIN ? r->x - FL_COL_MARGIN : 0;
    JDIMENSION hi = r->x + r->width;
    hi = out_w - hi > FL_COL_MARGIN ? hi + FL_COL_MARGIN : out_w;
    xoff = lo;
    crop_w = hi - lo;
    jpeg_crop_scanline(cinfo, &xoff, &crop_w);
  }
  col = r->x - xoff;
  if (!fl_reserve_scratch(j, (size_t)crop_w * comps * FL_ROWS_PER_READ)) {
    fl_set_message(j, "out of memory for the scanline buffer");
    jpeg_abort_decompress(cinfo);
    return FL_OUT_OF_MEMORY;
  }
  for (i = 0; i < FL_ROWS_PER_READ; i++)
    rows[i] = j->scratch + (size_t)i * crop_w * comps;

  first_row = r->y;
  if ((r->flags & FL_SKIP_ROWS) && first_row > FL_ROW_MARGIN) {
    JDIMENSION target = first_row - FL_ROW_MARGIN;
    jpeg_skip_scanlines(cinfo, target);
  }
  while (cinfo->output_scanline < first_row) {
    JDIMENSION want = first_row - cinfo->output_scanline;
    if (jpeg_read_scanlines(cinfo, rows, want < FL_ROWS_PER_READ ? want : FL_ROWS_PER_READ) == 0)
      ERREXIT(cinfo, JERR_INPUT_EOF);
  }
  while (cinfo->output_scanline < r->y + r->height) {
    JDIMENSION done = cinfo->output_scanline - r->y;
    JDIMENSION want = r->height - done;
    n = jpeg_read_scanlines(cinfo, rows, want < FL_ROWS_PER_READ ? want : FL_ROWS_PER_READ);
    if (n == 0) ERREXIT(cinfo, JERR_INPUT_EOF);
    for (i = 0; i < n; i++) {
      uint8_t *dst = r->out + (size_t)(done + i) * r->out_stride;
      const JSAMPLE *src = rows[i] + (size_t)col * comps;
      if (r->cmyk)
        fl_cmyk_to_rgb(src, dst, r->width);
      else
        memcpy(dst, src, in_row_bytes);
    }
  }
  if (r->flags & FL_STOP_EARLY) {
    jpeg_abort_decompress(cinfo);
    return FL_OK;
  }
  while (cinfo->output_scanline < out_h)
    if (jpeg_read_scanlines(cinfo, rows, FL_ROWS_PER_READ) == 0) ERREXIT(cinfo, JERR_INPUT_EOF);
  jpeg_finish_decompress(cinfo);
  return FL_OK;
}
