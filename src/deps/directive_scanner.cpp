#include "deps/directive_scanner.hpp"

#include "deps/name_directory.hpp"
#include "deps/source_text.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#if __has_include(<sys/platform/x86.h>)
#include <sys/platform/x86.h>  // glibc 2.33+
#define KCACHE_HAVE_GLIBC_X86_FEATURES 1
#endif
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kcache::jit {

namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

// Identifier (and pp-number) characters. Bytes of UTF-8 sequences and `$`
// count: compilers accept them in identifiers, and taking them keeps `éR"`
// and `$R"` from looking like raw string prefixes.
bool is_ident(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '_' ||
         u == '$' || u >= 0x80;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The characters the scan stops at outside comments and literals.
constexpr std::array<char, 5> k_code_specials{'/', '"', '\'', '#', '%'};
// The characters a directive is copied up to in one run.
constexpr std::array<char, 6> k_directive_specials{'\n', '\\', '/', '"', '\'', '<'};

template <std::size_t N>
constexpr std::array<bool, 256> make_table(const std::array<char, N>& chars) {
  std::array<bool, 256> t{};
  for (const char c : chars) {
    t[static_cast<unsigned char>(c)] = true;
  }
  return t;
}
constexpr std::array<bool, 256> k_is_code_special = make_table(k_code_specials);
constexpr std::array<bool, 256> k_is_directive_special = make_table(k_directive_specials);

// The search for the next code special sees every byte of code outside
// comments, so on x86-64 it compares 64 bytes a round with AVX2 where the CPU
// has it, else 16 with SSE2 (every x86-64 has that); elsewhere one byte at a time.
#if defined(__x86_64__) && defined(__GNUC__)
#define KCACHE_SCAN_AVX2 1
__attribute__((target("avx2"))) const char* find_special_avx2(const char* p, const char* end) {
  const __m256i slash = _mm256_set1_epi8('/');
  const __m256i quote = _mm256_set1_epi8('"');
  const __m256i apostrophe = _mm256_set1_epi8('\'');
  const __m256i hash = _mm256_set1_epi8('#');
  const __m256i percent = _mm256_set1_epi8('%');
  while (end - p >= 64) {
    __m256i a;
    __m256i b;
    std::memcpy(&a, p, sizeof a); // unaligned loads
    std::memcpy(&b, p + 32, sizeof b);
    const __m256i hit_a = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi8(a, slash), _mm256_cmpeq_epi8(a, quote)),
            _mm256_or_si256(_mm256_cmpeq_epi8(a, apostrophe), _mm256_cmpeq_epi8(a, hash))),
        _mm256_cmpeq_epi8(a, percent));
    const __m256i hit_b = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi8(b, slash), _mm256_cmpeq_epi8(b, quote)),
            _mm256_or_si256(_mm256_cmpeq_epi8(b, apostrophe), _mm256_cmpeq_epi8(b, hash))),
        _mm256_cmpeq_epi8(b, percent));
    const __m256i any = _mm256_or_si256(hit_a, hit_b);
    if (_mm256_testz_si256(any, any) == 0) {
      const auto mask_a = static_cast<std::uint32_t>(_mm256_movemask_epi8(hit_a));
      if (mask_a != 0) {
        return p + __builtin_ctz(mask_a);
      }
      return p + 32 + __builtin_ctz(static_cast<std::uint32_t>(_mm256_movemask_epi8(hit_b)));
    }
    p += 64;
  }
  return p;
}

// glibc's dynamic loader has already asked the CPU (and the OS) what it can
// do; reading its answer costs nothing, while __builtin_cpu_init() runs CPUID
// again, and each CPUID is a trap to the hypervisor in a virtual machine:
// tens of microseconds of a cache hit that takes a few milliseconds.
bool cpu_has_avx2() {
#if KCACHE_HAVE_GLIBC_X86_FEATURES
  static const bool has = CPU_FEATURE_ACTIVE(AVX2);
#else
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
#endif
  return has;
}
#endif

// Returns the position of the first code special in [from, size), or size.
std::size_t find_special(std::string_view t, std::size_t from) {
  const char* p = t.data() + from;
  const char* const end = t.data() + t.size();
#if defined(KCACHE_SCAN_AVX2)
  if (cpu_has_avx2()) {
    p = find_special_avx2(p, end);
    if (p != end && k_is_code_special[static_cast<unsigned char>(*p)]) {
      return static_cast<std::size_t>(p - t.data());
    }
  }
#endif
#if defined(__SSE2__)
  const __m128i slash = _mm_set1_epi8('/');
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i apostrophe = _mm_set1_epi8('\'');
  const __m128i hash = _mm_set1_epi8('#');
  const __m128i percent = _mm_set1_epi8('%');
  while (end - p >= 16) {
    __m128i v;
    std::memcpy(&v, p, sizeof v); // an unaligned load
    const __m128i hit = _mm_or_si128(
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, slash), _mm_cmpeq_epi8(v, quote)),
                     _mm_or_si128(_mm_cmpeq_epi8(v, apostrophe), _mm_cmpeq_epi8(v, hash))),
        _mm_cmpeq_epi8(v, percent));
    const int mask = _mm_movemask_epi8(hit);
    if (mask != 0) {
      return static_cast<std::size_t>(p - t.data()) +
             static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
    }
    p += 16;
  }
#endif
  while (p < end && !k_is_code_special[static_cast<unsigned char>(*p)]) {
    ++p;
  }
  return static_cast<std::size_t>(p - t.data());
}

// Parses `"name"` or `<name>` at the start of `s` (after blanks); returns false when neither.
bool parse_header_name(std::string_view s, IncludeDirective& d) {
  std::size_t i = 0;
  while (i < s.size() && is_blank(s[i])) {
    ++i;
  }
  if (i >= s.size()) {
    return false;
  }
  const char open = s[i];
  const char close = open == '"' ? '"' : (open == '<' ? '>' : '\0');
  if (close == '\0') {
    return false;
  }
  const auto end = s.find(close, i + 1);
  if (end == std::string_view::npos || end == i + 1) {
    return false;
  }
  d.name = std::string(s.substr(i + 1, end - i - 1));
  d.angled = open == '<';
  return true;
}

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && is_blank(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

bool is_include_word(std::string_view w) {
  return w == "include" || w == "include_next" || w == "import";
}

// One scan of one text. Positions are indices into the text; every skip_*
// and end_of_* function moves only forward, so the scan is linear.
class Scanner {
public:
  Scanner(std::string_view text, std::string* computed, bool keep_computed)
      : m_text(text), m_computed(computed), m_keep_computed(keep_computed) {}

  std::vector<MacroDefinition> take_defines() { return std::move(m_defines); }

  std::vector<IncludeDirective> run() {
    const std::size_t n = m_text.size();
    std::size_t i = 0;
    while (true) {
      i = find_special(m_text, i);
      if (i >= n) {
        break;
      }
      switch (m_text[i]) {
      case '/': {
        const std::size_t end = skip_comment(i);
        i = end == i ? i + 1 : end;
        break;
      }
      case '"':
      case '\'':
        i = skip_literal(i);
        break;
      case '#':
        i = starts_line(i) ? directive(i + 1, i) : i + 1;
        break;
      default: { // '%': the digraph `%:` is `#`
        const std::size_t colon = skip_splices(i + 1);
        if (colon < n && m_text[colon] == ':' && starts_line(i)) {
          i = directive(colon + 1, i);
        } else {
          i = i + 1;
        }
        break;
      }
      }
    }
    return std::move(m_out);
  }

private:
  // Returns the length of a backslash-newline at `i` (0 when there is none).
  std::size_t splice_at(std::size_t i) const {
    const std::size_t n = m_text.size();
    if (i >= n || m_text[i] != '\\') {
      return 0;
    }
    if (i + 1 < n && m_text[i + 1] == '\n') {
      return 2;
    }
    if (i + 2 < n && m_text[i + 1] == '\r' && m_text[i + 2] == '\n') {
      return 3;
    }
    return 0;
  }

  // Returns the first position at or after `i` that does not start a backslash-newline.
  std::size_t skip_splices(std::size_t i) const {
    while (const std::size_t s = splice_at(i)) {
      i += s;
    }
    return i;
  }

  // `i` is a slash outside comments and literals. Returns the end of the
  // comment it opens (a line comment ends at its newline, which is not
  // consumed; a block comment after its `*/`), or `i` when it opens none.
  std::size_t skip_comment(std::size_t i) {
    const std::size_t n = m_text.size();
    const std::size_t j = skip_splices(i + 1);
    if (j >= n || (m_text[j] != '/' && m_text[j] != '*')) {
      return i;
    }
    const std::size_t end =
        m_text[j] == '/' ? end_of_line_comment(j + 1) : end_of_block_comment(j + 1);
    m_code_from = end;
    m_after_literal = false;
    return end;
  }

  // Returns the position of the newline that ends a line comment whose text starts at `i`, or the
  // size.
  std::size_t end_of_line_comment(std::size_t i) const {
    const std::size_t n = m_text.size();
    while (i < n) {
      const void* hit = std::memchr(m_text.data() + i, '\n', n - i);
      if (hit == nullptr) {
        return n;
      }
      const auto nl = static_cast<std::size_t>(static_cast<const char*>(hit) - m_text.data());
      // A continuation extends a line comment (translation phase 2 comes first).
      const bool spliced = (nl >= i + 1 && m_text[nl - 1] == '\\') ||
                           (nl >= i + 2 && m_text[nl - 1] == '\r' && m_text[nl - 2] == '\\');
      if (!spliced) {
        return nl;
      }
      i = nl + 1;
    }
    return n;
  }

  // Returns the position after the `*/` that closes a block comment whose text
  // starts at `i` (`*\` newline `/` closes it too), or the size.
  std::size_t end_of_block_comment(std::size_t i) const {
    const std::size_t n = m_text.size();
    while (i < n) {
      const void* hit = std::memchr(m_text.data() + i, '*', n - i);
      if (hit == nullptr) {
        return n;
      }
      const auto star = static_cast<std::size_t>(static_cast<const char*>(hit) - m_text.data());
      const std::size_t j = skip_splices(star + 1);
      if (j < n && m_text[j] == '/') {
        return j + 1;
      }
      i = star + 1;
    }
    return n;
  }

  // `i` is a quote or apostrophe outside comments and literals. Returns the
  // position after the literal it opens (for an unterminated one, its
  // newline), or `i + 1` for a digit separator.
  std::size_t skip_literal(std::size_t i) {
    std::size_t end = 0;
    if (m_text[i] == '\'') {
      if (is_digit_separator(i)) {
        return i + 1;
      }
      end = end_of_quoted(i + 1, '\'');
    } else if (const auto raw = is_raw_prefix(i) ? end_of_raw_string(i) : std::nullopt) {
      end = *raw;
    } else {
      end = end_of_quoted(i + 1, '"');
    }
    m_code_from = end;
    m_after_literal = true;
    return end;
  }

  // Returns the position after the closing `quote` of a literal whose text
  // starts at `i`; at an unescaped newline (an unterminated literal) its
  // position; else the size.
  std::size_t end_of_quoted(std::size_t i, char quote) const {
    const std::size_t n = m_text.size();
    while (i < n) {
      const char c = m_text[i];
      if (c == quote) {
        return i + 1;
      }
      if (c == '\n') {
        return i;
      }
      if (c == '\\') {
        // A continuation (also before CR LF) or an escape: either way the
        // next character does not end the literal.
        const std::size_t s = splice_at(i);
        i += s != 0 ? s : 2;
        continue;
      }
      ++i;
    }
    return n;
  }

  // Returns whether the quote at `q` opens a raw string: the identifier
  // right before it is exactly R, u8R, uR, UR or LR. An identifier right
  // after a literal is that literal's suffix, not a prefix.
  bool is_raw_prefix(std::size_t q) const {
    std::size_t j = q;
    while (j > m_code_from && is_ident(m_text[j - 1])) {
      --j;
    }
    if (j == m_code_from && m_after_literal && j != 0) {
      return false;
    }
    const std::string_view prefix = m_text.substr(j, q - j);
    return prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" || prefix == "LR";
  }

  // `q` is the quote of R"delim( ... )delim". Returns the position after the
  // closing quote, or nothing when the delimiter is invalid or the string
  // never ends (the quote is then taken as an ordinary string: the compiler
  // rejects the file anyway, and a line-bounded literal hides the least).
  std::optional<std::size_t> end_of_raw_string(std::size_t q) const {
    constexpr std::size_t k_max_delimiter = 16;
    const std::size_t n = m_text.size();
    std::size_t open = q + 1;
    while (open < n && m_text[open] != '(') {
      const char c = m_text[open];
      if (open - q - 1 >= k_max_delimiter || c == ' ' || c == ')' || c == '\\' || c == '\t' ||
          c == '\v' || c == '\f' || c == '\n' || c == '\r' || c == '"') {
        return std::nullopt;
      }
      ++open;
    }
    if (open >= n) {
      return std::nullopt;
    }
    std::array<char, k_max_delimiter + 2> closer{};
    const std::size_t delimiter = open - q - 1;
    closer[0] = ')';
    std::memcpy(closer.data() + 1, m_text.data() + q + 1, delimiter);
    closer[delimiter + 1] = '"';
    const auto at = m_text.find(std::string_view(closer.data(), delimiter + 2), open + 1);
    if (at == std::string_view::npos) {
      return std::nullopt;
    }
    return at + delimiter + 2;
  }

  // Returns whether the apostrophe at `a` is a digit separator (C++14), that
  // is whether it continues a pp-number: a number directly before it, an
  // identifier character directly after.
  bool is_digit_separator(std::size_t a) const {
    if (a + 1 >= m_text.size() || !is_ident(m_text[a + 1]) || a == 0) {
      return false;
    }
    // The run of pp-number characters before `a`. A sign after e/E/p/P is
    // not crossed: what follows it starts with a digit whenever it matters.
    // An apostrophe in the run was taken for a separator (a literal's would
    // have moved m_code_from past it), so the same pp-number goes on up to
    // `a`; stopping there also keeps 1'1'1'... linear.
    std::size_t j = a;
    while (j > m_code_from &&
           (is_ident(m_text[j - 1]) || m_text[j - 1] == '.' || m_text[j - 1] == '\'')) {
      if (m_text[j - 1] == '\'') {
        return true;
      }
      --j;
    }
    if (j == a) {
      return false;
    }
    // Lex the run forward: a pp-number swallows everything up to `a`; an
    // identifier stops at a dot.
    std::size_t k = j;
    while (k < a) {
      const char c = m_text[k];
      if (is_digit(c) || (c == '.' && k + 1 < a && is_digit(m_text[k + 1]))) {
        return true;
      }
      if (is_ident(c)) {
        while (k < a && is_ident(m_text[k])) {
          ++k;
        }
      } else {
        ++k;
      }
    }
    return false;
  }

  // Returns whether the `#` (or `%:`) at `h` may be the first token of its
  // line: only blanks lie between it and a newline, the start, or the `/`
  // that ends a block comment. After a comment this may be wrong in the
  // direction that takes more directives (`x; /* ... */ #include` is none).
  bool starts_line(std::size_t h) const {
    std::size_t j = h;
    while (j > 0 && is_blank(m_text[j - 1])) {
      --j;
    }
    return j == 0 || m_text[j - 1] == '\n' || m_text[j - 1] == '/';
  }

  // Returns whether a directive whose text so far is m_line expects a header
  // name next (`#include`, or `__has_include(` in a condition).
  bool header_name_expected() const {
    const std::string_view so_far = trim_blanks(m_line);
    if (is_include_word(so_far)) {
      return true;
    }
    if (so_far.empty() || so_far.back() != '(') {
      return false;
    }
    const std::string_view before = trim_blanks(so_far.substr(0, so_far.size() - 1));
    return before.ends_with("__has_include") || before.ends_with("__has_include_next");
  }

  // Copies the directive whose text starts at `i` (the `#` is at `hash`) into
  // m_line with comments replaced by a blank and continuations joined, reads
  // it, and returns the position of the newline that ends it (or the size).
  std::size_t directive(std::size_t i, std::size_t hash) {
    const std::size_t n = m_text.size();
    m_line.clear();
    while (i < n) {
      const char c = m_text[i];
      if (c == '\n') {
        break;
      }
      if (const std::size_t s = splice_at(i)) {
        i += s;
        continue;
      }
      if (c == '/') {
        const std::size_t end = skip_comment(i);
        if (end != i) {
          // A block comment is one blank, even across lines: the directive goes on after it.
          m_line.push_back(' ');
          i = end;
          continue;
        }
      }
      if ((c == '"' || c == '<') && header_name_expected()) {
        // A header name is no string literal: `//`, `/*` and `\` in it are characters of the name.
        const char close = c == '"' ? '"' : '>';
        m_line.push_back(c);
        ++i;
        while (i < n && m_text[i] != '\n' && m_text[i] != close) {
          if (const std::size_t s = splice_at(i)) {
            i += s;
            continue;
          }
          m_line.push_back(m_text[i++]);
        }
        if (i < n && m_text[i] == close) {
          m_line.push_back(m_text[i++]);
        }
        continue;
      }
      if (c == '"' || c == '\'') {
        const std::size_t end = skip_literal(i);
        m_line.append(m_text.data() + i, end - i);
        i = end;
        continue;
      }
      // Copy up to the next character that needs a look in one run.
      std::size_t run_end = i + 1;
      while (run_end < n && !k_is_directive_special[static_cast<unsigned char>(m_text[run_end])]) {
        ++run_end;
      }
      m_line.append(m_text.data() + i, run_end - i);
      i = run_end;
    }
    read_directive(hash);
    return i;
  }

  // Reads the directive in m_line (its text after the `#`).
  void read_directive(std::size_t hash) {
    const std::string_view line(m_line);
    std::size_t i = 0;
    while (i < line.size() && is_blank(line[i])) {
      ++i;
    }
    std::size_t j = i;
    while (j < line.size() && is_ident(line[j])) {
      ++j;
    }
    const std::string_view word = line.substr(i, j - i);
    if (is_include_word(word)) {
      IncludeDirective d;
      if (parse_header_name(line.substr(j), d)) {
        m_out.push_back(std::move(d));
      } else {
        note_computed(hash, "#" + std::string(word) + " without a literal file name");
        keep_computed(trim_blanks(line.substr(j)));
      }
      return;
    }
    if (word == "define" && m_keep_computed) {
      read_define(line.substr(j));  // and look for __has_include in it below
    }
    // __has_include("x") / __has_include(<x>) anywhere in a condition or a macro.
    for (std::size_t h = line.find("__has_include"); h != std::string_view::npos;
         h = line.find("__has_include", h + 1)) {
      std::size_t k = h + 13;
      if (line.substr(k, 5) == "_next") {
        k += 5;
      }
      while (k < line.size() && is_blank(line[k])) {
        ++k;
      }
      IncludeDirective d;
      if (k < line.size() && line[k] == '(' && parse_header_name(line.substr(k + 1), d)) {
        m_out.push_back(std::move(d));
      } else if (k < line.size() && is_ident(line[k])) {
        // Part of a longer identifier (e.g. __has_include_x): not the operator.
      } else if (k >= line.size() || line[k] != ')') {
        note_computed(hash, "__has_include without a literal file name");
        if (k < line.size() && line[k] == '(') {
          // The operand runs to the matching parenthesis.
          int depth = 1;
          std::size_t e = k + 1;
          for (; e < line.size() && depth > 0; ++e) {
            depth += line[e] == '(' ? 1 : (line[e] == ')' ? -1 : 0);
          }
          keep_computed(trim_blanks(line.substr(k + 1, e - k - 2)));
        } else {
          keep_computed(trim_blanks(line.substr(k)));
        }
      }
    }
  }

  void keep_computed(std::string_view tokens) {
    if (m_keep_computed && !tokens.empty()) {
      m_out.push_back({std::string(tokens), false, true});
    }
  }

  // Reads `name(params) body` or `name body` (the text after `define`).
  void read_define(std::string_view rest) {
    std::size_t i = 0;
    while (i < rest.size() && is_blank(rest[i])) {
      ++i;
    }
    std::size_t j = i;
    while (j < rest.size() && is_ident(rest[j])) {
      ++j;
    }
    if (j == i) {
      return;
    }
    MacroDefinition m;
    m.name = std::string(rest.substr(i, j - i));
    if (j < rest.size() && rest[j] == '(') {
      const auto close = rest.find(')', j + 1);
      if (close == std::string_view::npos) {
        return;
      }
      m.function_like = true;
      m.params = std::string(trim_blanks(rest.substr(j + 1, close - j - 1)));
      j = close + 1;
    }
    m.body = std::string(trim_blanks(rest.substr(j)));
    m_defines.push_back(std::move(m));
  }

  void note_computed(std::size_t hash, std::string_view what) const {
    if (m_computed != nullptr && m_computed->empty()) {
      const auto line_no =
          1 + std::count(m_text.begin(), m_text.begin() + static_cast<std::ptrdiff_t>(hash), '\n');
      *m_computed = "line " + std::to_string(line_no) + ": " + std::string(what);
    }
  }

  std::string_view m_text;
  std::string* m_computed;
  bool m_keep_computed = false;  // scan_file(): keep computed directives and #defines
  std::vector<MacroDefinition> m_defines;
  // Backward looks (raw string prefixes, digit separators) stop here: the end
  // of the last comment or literal skipped.
  std::size_t m_code_from = 0;
  bool m_after_literal = false; // m_code_from ends a literal (not a comment)
  std::string m_line;           // the directive being read; reused
  std::vector<IncludeDirective> m_out;
};

} // namespace

namespace {

// Appends the elements of `more` that `out` does not hold yet, in order.
template <class T>
void append_new(std::vector<T>& out, std::vector<T> more) {
  const std::size_t before = out.size();
  for (auto& m : more) {
    if (std::find(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(before), m) ==
        out.begin() + static_cast<std::ptrdiff_t>(before)) {
      out.push_back(std::move(m));
    }
  }
}

}  // namespace

std::vector<IncludeDirective> find_directives(std::string_view text, std::string* computed) {
  auto out = Scanner(text, computed, false).run();
  if (has_trigraph(text)) {
    // Both readings (deps/source_text.hpp): what -std=c++14 reads as well.
    const std::string translated = translate_trigraphs(text);
    append_new(out, Scanner(translated, computed, false).run());
  }
  return out;
}

FileDirectives scan_file(std::string_view text, MainFileTokens tokens) {
  Scanner s(text, nullptr, true);
  FileDirectives out;
  out.includes = s.run();
  out.defines = s.take_defines();
  out.names_main_file = tokens == MainFileTokens::look && mentions_main_file_anywhere(text);
  if (has_trigraph(text)) {
    // Both readings (deps/source_text.hpp): what -std=c++14 reads as well.
    const std::string translated = translate_trigraphs(text);
    Scanner t(translated, nullptr, true);
    append_new(out.includes, t.run());
    append_new(out.defines, t.take_defines());
    out.names_main_file = out.names_main_file ||
                          (tokens == MainFileTokens::look && mentions_main_file_anywhere(translated));
  }
  return out;
}

} // namespace kcache::jit
