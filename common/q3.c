#include "q3.h"

#include <errno.h>
#include <string.h>

bool q3_is_oob(const uint8_t *buf, size_t len)
{
	return len >= Q3_OOB_PREFIX_LEN && buf[0] == 0xff && buf[1] == 0xff && buf[2] == 0xff &&
	       buf[3] == 0xff;
}

/*
 * MSG_ReadStringLine: bytes up to '\n', '\0' or the end of the packet, at most
 * 1023 of them; '%' becomes '.' ("translate all fmt spec to avoid crash
 * bugs") and so does anything above 127 ("don't allow higher ascii values").
 * line gets a NUL terminator; returns the line length.
 */
static size_t read_string_line(const uint8_t *p, size_t len, char *line, size_t *consumed)
{
	size_t l = 0, i = 0;

	while (i < len && l < Q3_MAX_STRING_CHARS - 1) {
		uint8_t c = p[i++];

		if (c == 0 || c == '\n')
			break;
		if (c == '%' || c > 127)
			c = '.';
		line[l++] = (char)c;
	}
	line[l] = '\0';
	*consumed = i;
	return l;
}

/*
 * Cmd_TokenizeString over a NUL-terminated line of bytes 1..127. When
 * only_first, it stops after the first token. Returns argc.
 */
static int tokenize(const char *text, struct q3_args *out, char *first, size_t first_size,
		    bool only_first)
{
	size_t o = 0;
	int argc = 0;

	for (;;) {
		size_t start;

		if (argc == Q3_MAX_TOKENS)
			return argc;
		/* Skip whitespace and comments. */
		for (;;) {
			while (*text != '\0' && *text <= ' ')
				text++;
			if (*text == '\0')
				return argc;
			if (text[0] == '/' && text[1] == '/')
				return argc;
			if (text[0] == '/' && text[1] == '*') {
				/* The engine starts matching "* /" at the
				 * opening '/', so "/ * /" closes itself. */
				while (*text != '\0' && (text[0] != '*' || text[1] != '/'))
					text++;
				if (*text == '\0')
					return argc;
				text += 2;
			} else {
				break;
			}
		}
		argc++;
		if (only_first) {
			size_t n = 0;

			if (*text == '"') {
				text++;
				while (*text != '\0' && *text != '"') {
					if (n + 1 < first_size)
						first[n++] = *text;
					text++;
				}
			} else {
				while (*text > ' ' && *text != '"' &&
				       !(text[0] == '/' && (text[1] == '/' || text[1] == '*'))) {
					if (n + 1 < first_size)
						first[n++] = *text;
					text++;
				}
			}
			first[n] = '\0';
			return argc;
		}
		start = o;
		out->argv[argc - 1] = (uint16_t)start;
		if (*text == '"') {
			text++;
			while (*text != '\0' && *text != '"')
				out->text[o++] = *text++;
			out->text[o++] = '\0';
			if (*text == '\0')
				return argc;
			text++;
			continue;
		}
		while (*text > ' ') {
			if (text[0] == '"')
				break;
			if (text[0] == '/' && (text[1] == '/' || text[1] == '*'))
				break;
			out->text[o++] = *text++;
		}
		out->text[o++] = '\0';
		if (*text == '\0')
			return argc;
	}
}

int q3_oob_tokenize(const uint8_t *buf, size_t len, struct q3_args *out)
{
	char line[Q3_MAX_STRING_CHARS];

	if (!q3_is_oob(buf, len))
		return -EBADMSG;
	read_string_line(buf + Q3_OOB_PREFIX_LEN, len - Q3_OOB_PREFIX_LEN, line, &out->consumed);
	out->argc = tokenize(line, out, NULL, 0, false);
	return out->argc;
}

const char *q3_argv(const struct q3_args *a, int i)
{
	if (i < 0 || i >= a->argc)
		return "";
	return a->text + a->argv[i];
}

int q3_oob_command(const uint8_t *buf, size_t len, char *tok, size_t size)
{
	char line[Q3_MAX_STRING_CHARS];
	size_t consumed;

	if (!q3_is_oob(buf, len))
		return -EBADMSG;
	tok[0] = '\0';
	read_string_line(buf + Q3_OOB_PREFIX_LEN, len - Q3_OOB_PREFIX_LEN, line, &consumed);
	if (tokenize(line, NULL, tok, size, true) == 0)
		return 0;
	return (int)strlen(tok);
}

bool q3_cmd_eq(const char *tok, const char *cmd)
{
	for (;; tok++, cmd++) {
		char a = *tok, b = *cmd;

		if (a >= 'A' && a <= 'Z')
			a = (char)(a - 'A' + 'a');
		if (b >= 'A' && b <= 'Z')
			b = (char)(b - 'A' + 'a');
		if (a != b)
			return false;
		if (a == '\0')
			return true;
	}
}

int q3_oob_build(uint8_t *buf, size_t size, const char *text, size_t text_len)
{
	if (size < Q3_OOB_PREFIX_LEN || text_len > size - Q3_OOB_PREFIX_LEN)
		return -EMSGSIZE;
	memset(buf, 0xff, Q3_OOB_PREFIX_LEN);
	memcpy(buf + Q3_OOB_PREFIX_LEN, text, text_len);
	return (int)(Q3_OOB_PREFIX_LEN + text_len);
}
