/* The Avro row writer of snowsource/core/avro_rows.py, compiled: the same bytes for the same
 * rows, the same rows left to the general writer (None). Optional: setup.py builds it where a C
 * compiler is present, and avro_rows falls back to its generated Python code where it is not.
 *
 * Why compiled: in Python, writing a 29-column row costs about 15 us (the interpreter's
 * dispatch per field, date-time arithmetic on Python ints); here it is a dictionary look-up and
 * a memcpy per field, and date-times are parsed in place (docs/performance.md).
 *
 * A RowWriter holds, per schema field in order: its column (str), its kind (STRING,
 * REFERENCE, TIMESTAMP or REMEMBERED) and, for REMEMBERED, the dict subclass whose look-up
 * (which converts and remembers a text on a miss) answers the field's union bytes. Called with
 * a row (a dict of column -> str) it answers the framed record's bytes, or None when the
 * row is not the common row: a missing or extra column, a value that is not a str, one that
 * does not convert (the look-ups raise one of the `fallback` exception types).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { STRING = 0, REFERENCE = 1, TIMESTAMP = 2, REMEMBERED = 3 };

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    PyObject **columns;    /* str, owned */
    unsigned char *kinds;
    PyObject **writers;    /* REMEMBERED: a dict subclass, owned; else NULL */
    PyObject *prefix;      /* bytes */
    PyObject *tail;        /* bytes */
    PyObject *timestamp;   /* callable: text -> bytes, for a date-time not parsed here */
    PyObject *fallback;    /* exception type or tuple of them */
} RowWriter;

typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t capacity;
    char local[4096];
} Buffer;

static int reserve(Buffer *buf, Py_ssize_t more) {
    if (buf->size + more <= buf->capacity) {
        return 0;
    }
    Py_ssize_t capacity = buf->capacity * 2;
    while (capacity < buf->size + more) {
        capacity *= 2;
    }
    char *data;
    if (buf->data == buf->local) {
        data = PyMem_Malloc((size_t)capacity);
        if (data != NULL) {
            memcpy(data, buf->local, (size_t)buf->size);
        }
    } else {
        data = PyMem_Realloc(buf->data, (size_t)capacity);
    }
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    buf->data = data;
    buf->capacity = capacity;
    return 0;
}

static inline int put_bytes(Buffer *buf, const char *data, Py_ssize_t size) {
    if (reserve(buf, size) < 0) {
        return -1;
    }
    memcpy(buf->data + buf->size, data, (size_t)size);
    buf->size += size;
    return 0;
}

/* Union branch 1, then the zig-zag varint of n. */
static inline int put_branch_long(Buffer *buf, int64_t n) {
    if (reserve(buf, 11) < 0) {
        return -1;
    }
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    char *out = buf->data + buf->size;
    Py_ssize_t i = 0;
    out[i++] = 2;
    while (z > 0x7F) {
        out[i++] = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    out[i++] = (char)z;
    buf->size += i;
    return 0;
}

static inline int ascii_digit(const char *s, int i) {
    return s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : -1;
}

static inline int two_digits(const char *s, int i) {
    int a = ascii_digit(s, i), b = ascii_digit(s, i + 1);
    return a < 0 || b < 0 ? -1 : a * 10 + b;
}

/* Days from 1970-01-01 to a proleptic Gregorian date (valid input only). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DD hh:mm:ss" (19 bytes) as seconds since the epoch; 0 on success, -1 for any text
 * value_encoding._epoch_seconds would not accept exactly so (left to it). */
static int parse_date_time(const char *s, Py_ssize_t size, int64_t *seconds) {
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (size != 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' ||
        s[16] != ':') {
        return -1;
    }
    int hi = two_digits(s, 0), lo = two_digits(s, 2);
    int month = two_digits(s, 5), day = two_digits(s, 8);
    int hour = two_digits(s, 11), minute = two_digits(s, 14), second = two_digits(s, 17);
    if (hi < 0 || lo < 0 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 ||
        minute < 0 || minute > 59 || second < 0 || second > 59) {
        return -1;
    }
    int year = hi * 100 + lo;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (year < 1 || day > month_days[month - 1] + (month == 2 && leap)) {
        return -1;
    }
    *seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
    return 0;
}

/* A remembered kind's or the timestamp writer's answer: bytes appended; -1 with an error. */
static int put_answer(Buffer *buf, PyObject *answer) {
    if (answer == NULL) {
        return -1;
    }
    if (!PyBytes_Check(answer)) {
        Py_DECREF(answer);
        PyErr_SetString(PyExc_TypeError, "a field writer answered something other than bytes");
        return -1;
    }
    int rc = put_bytes(buf, PyBytes_AS_STRING(answer), PyBytes_GET_SIZE(answer));
    Py_DECREF(answer);
    return rc;
}

static int put_field(RowWriter *self, Buffer *buf, Py_ssize_t i, PyObject *value) {
    unsigned char kind = self->kinds[i];
    if (kind == REMEMBERED) {
        PyObject *known = PyDict_GetItemWithError(self->writers[i], value);
        if (known != NULL) {
            Py_INCREF(known);
            return put_answer(buf, known);
        }
        if (PyErr_Occurred()) {
            return -1;
        }
        return put_answer(buf, PyObject_GetItem(self->writers[i], value));
    }
    if (!PyUnicode_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "not a str");
        return -1;
    }
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(value, &size);
    if (text == NULL) {
        return -1;
    }
    if (kind == TIMESTAMP) {
        int64_t seconds;
        if (size == 0) {
            return put_bytes(buf, "\0", 1);
        }
        if (parse_date_time(text, size, &seconds) == 0) {
            return put_branch_long(buf, seconds * 1000);
        }
        return put_answer(buf, PyObject_CallOneArg(self->timestamp, value));
    }
    if (kind == REFERENCE && size == 0) {
        return put_bytes(buf, "\0", 1);
    }
    if (put_branch_long(buf, size) < 0) {
        return -1;
    }
    return put_bytes(buf, text, size);
}

static PyObject *RowWriter_call(RowWriter *self, PyObject *args, PyObject *kwargs) {
    PyObject *row;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "RowWriter takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "RowWriter", 1, 1, &row)) {
        return NULL;
    }
    if (!PyDict_Check(row) || PyDict_GET_SIZE(row) != self->count) {
        Py_RETURN_NONE;
    }
    Buffer buf;
    buf.data = buf.local;
    buf.size = 0;
    buf.capacity = (Py_ssize_t)sizeof(buf.local);
    PyObject *result = NULL;
    if (put_bytes(&buf, PyBytes_AS_STRING(self->prefix), PyBytes_GET_SIZE(self->prefix)) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < self->count; i++) {
        PyObject *value = PyDict_GetItemWithError(row, self->columns[i]);
        if (value == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, self->columns[i]);
            }
            goto failed;
        }
        Py_INCREF(value); /* a remembered kind's writer runs Python code */
        int rc = put_field(self, &buf, i, value);
        Py_DECREF(value);
        if (rc < 0) {
            goto failed;
        }
    }
    if (put_bytes(&buf, PyBytes_AS_STRING(self->tail), PyBytes_GET_SIZE(self->tail)) < 0) {
        goto done;
    }
    result = PyBytes_FromStringAndSize(buf.data, buf.size);
    goto done;
failed:
    if (PyErr_ExceptionMatches(self->fallback)) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
    }
done:
    if (buf.data != buf.local) {
        PyMem_Free(buf.data);
    }
    return result;
}

static int RowWriter_traverse(RowWriter *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Py_VISIT(self->columns[i]);
        Py_VISIT(self->writers[i]);
    }
    Py_VISIT(self->prefix);
    Py_VISIT(self->tail);
    Py_VISIT(self->timestamp);
    Py_VISIT(self->fallback);
    return 0;
}

static int RowWriter_clear(RowWriter *self) {
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Py_CLEAR(self->columns[i]);
        Py_CLEAR(self->writers[i]);
    }
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->tail);
    Py_CLEAR(self->timestamp);
    Py_CLEAR(self->fallback);
    return 0;
}

static void RowWriter_dealloc(RowWriter *self) {
    PyObject_GC_UnTrack(self);
    RowWriter_clear(self);
    PyMem_Free(self->columns);
    PyMem_Free(self->kinds);
    PyMem_Free(self->writers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* RowWriter(fields, prefix, tail, timestamp, fallback): fields a sequence of
 * (column: str, kind: int, writer: dict | None). */
static PyObject *RowWriter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fields", "prefix", "tail", "timestamp", "fallback", NULL};
    PyObject *fields, *prefix, *tail, *timestamp, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OSSOO", names, &fields, &prefix, &tail,
                                     &timestamp, &fallback)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(fields, "fields must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    RowWriter *self = (RowWriter *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    self->columns = PyMem_Calloc((size_t)count + 1, sizeof(PyObject *));
    self->kinds = PyMem_Calloc((size_t)count + 1, 1);
    self->writers = PyMem_Calloc((size_t)count + 1, sizeof(PyObject *));
    if (self->columns == NULL || self->kinds == NULL || self->writers == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *column, *writer;
        int kind;
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyArg_ParseTuple(item, "UiO", &column, &kind, &writer)) {
            goto error;
        }
        if (kind < STRING || kind > REMEMBERED || (kind == REMEMBERED && !PyDict_Check(writer))) {
            PyErr_Format(PyExc_ValueError, "field %zd: bad kind or writer", i);
            goto error;
        }
        self->columns[i] = Py_NewRef(column);
        self->kinds[i] = (unsigned char)kind;
        self->writers[i] = kind == REMEMBERED ? Py_NewRef(writer) : NULL;
        self->count = i + 1;
    }
    self->prefix = Py_NewRef(prefix);
    self->tail = Py_NewRef(tail);
    self->timestamp = Py_NewRef(timestamp);
    self->fallback = Py_NewRef(fallback);
    Py_DECREF(seq);
    return (PyObject *)self;
error:
    Py_DECREF(seq);
    Py_DECREF(self);
    return NULL;
}

static PyTypeObject RowWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "snowsource.core._avro_rows_c.RowWriter",
    .tp_doc = "The compiled Avro writer of one schema's common rows.",
    .tp_basicsize = sizeof(RowWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = RowWriter_new,
    .tp_call = (ternaryfunc)RowWriter_call,
    .tp_traverse = (traverseproc)RowWriter_traverse,
    .tp_clear = (inquiry)RowWriter_clear,
    .tp_dealloc = (destructor)RowWriter_dealloc,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "snowsource.core._avro_rows_c",
    .m_doc = "The compiled Avro row writer (optional; see avro_rows).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__avro_rows_c(void) {
    if (PyType_Ready(&RowWriterType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "RowWriter", (PyObject *)&RowWriterType) < 0 ||
        PyModule_AddIntConstant(m, "STRING", STRING) < 0 ||
        PyModule_AddIntConstant(m, "REFERENCE", REFERENCE) < 0 ||
        PyModule_AddIntConstant(m, "TIMESTAMP", TIMESTAMP) < 0 ||
        PyModule_AddIntConstant(m, "REMEMBERED", REMEMBERED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
