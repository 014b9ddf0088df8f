#include "relay_tunpipe.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ev.h"
#include "relay_tunmsg.h"
#include "ws.h"

void tunpipe_init(struct tunpipe *p, int fd, uint32_t id, size_t buf_max)
{
	p->fd = fd;
	p->io = NULL;
	p->id = id;
	p->bin = false;
	p->l_eof = p->r_eof = p->wr_shut = false;
	strbuf_init(&p->out, buf_max);
	p->out_off = 0;
	p->credit = TUNMSG_BIN_WINDOW;
	p->owed = 0;
}

void tunpipe_release(struct tunpipe *p, bool abort)
{
	if (abort) {
		struct linger lg = {.l_onoff = 1, .l_linger = 0};

		setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	if (p->io != NULL)
		ev_io_del(p->io, true);
	else if (p->fd >= 0)
		close(p->fd);
	p->io = NULL;
	p->fd = -1;
	strbuf_release(&p->out);
}

size_t tunpipe_pending(const struct tunpipe *p)
{
	return p->out.len - p->out_off;
}

void tunpipe_send_cmd(struct ws *ws, struct strbuf *msg, int cmd, uint32_t id)
{
	struct tunmsg m = {.cmd = (enum tunmsg_cmd)cmd, .stream_id = id};

	msg->len = 0;
	msg->bad = false;
	tunmsg_encode(&m, msg);
	if (!msg->bad && ws != NULL)
		ws_send(ws, false, msg->p, msg->len);
}

void tunsink_frame(const struct tunsink *k, const uint8_t *frame, size_t n)
{
	if (k->data != NULL) {
		uint8_t len[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8),
				  (uint8_t)n};

		ws_send(k->data, true, len, sizeof(len));
		ws_send(k->data, true, frame, n);
	} else if (k->ws != NULL) {
		ws_send(k->ws, true, frame, n);
	}
}

void tunsink_end(const struct tunsink *k, bool bin, int cmd, uint32_t id)
{
	uint8_t f[TUNMSG_BIN_HDR];

	if (!bin) {
		tunpipe_send_cmd(k->ws, k->msg, cmd, id);
		return;
	}
	tunmsg_bin_header(f, cmd == TUNMSG_CLOSE ? TUNMSG_BIN_CLOSE : TUNMSG_BIN_RESET, id);
	tunsink_frame(k, f, sizeof(f));
}

static size_t frame_len(const uint8_t *p)
{
	return (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | (size_t)p[3];
}

int tunsink_deframe(struct strbuf *asm, const uint8_t *in, size_t n,
		    void (*fn)(void *arg, const uint8_t *frame, size_t len), void *arg)
{
	while (n > 0) {
		size_t len, take;

		if (asm->len > 0 || n < 4) {
			/* A frame split across reads: gather just that one. */
			if (asm->len < 4) {
				take = 4 - asm->len < n ? 4 - asm->len : n;
				strbuf_append(asm, (const char *)in, take);
				in += take;
				n -= take;
				if (asm->len < 4)
					return asm->bad ? -EBADMSG : 0;
			}
			len = frame_len((const uint8_t *)asm->p);
			if (len == 0 || len > TUNMSG_WS_MAX)
				return -EBADMSG;
			take = 4 + len - asm->len < n ? 4 + len - asm->len : n;
			strbuf_append(asm, (const char *)in, take);
			in += take;
			n -= take;
			if (asm->bad)
				return -EBADMSG;
			if (asm->len == 4 + len) {
				asm->len = 0;
				fn(arg, (const uint8_t *)asm->p + 4, len);
			}
			continue;
		}
		/* Whole frames straight from the read buffer. */
		len = frame_len(in);
		if (len == 0 || len > TUNMSG_WS_MAX)
			return -EBADMSG;
		if (n < 4 + len) {
			strbuf_append(asm, (const char *)in, n);
			return asm->bad ? -EBADMSG : 0;
		}
		fn(arg, in + 4, len);
		in += 4 + len;
		n -= 4 + len;
	}
	return 0;
}

ssize_t tunpipe_flush(struct tunpipe *p, const struct tunsink *k)
{
	size_t before = p->out_off;

	while (p->out_off < p->out.len) {
		ssize_t n =
			send(p->fd, p->out.p + p->out_off, p->out.len - p->out_off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -1;
		}
		p->out_off += (size_t)n;
	}
	before = p->out_off - before;
	if (p->out_off == p->out.len) {
		p->out.len = p->out_off = 0;
		if (p->r_eof && !p->wr_shut) {
			shutdown(p->fd, SHUT_WR);
			p->wr_shut = true;
		}
	}
	/* Credit counts the tunnel's bytes, not the socket's (the REALM_LIST
	 * rewrite changes lengths); granted in big steps once little of them
	 * waits here. */
	if (p->bin && k->ws != NULL && p->owed >= TUNMSG_BIN_WINDOW / 4 &&
	    tunpipe_pending(p) < TUNMSG_BIN_WINDOW / 2) {
		uint8_t f[TUNMSG_BIN_HDR + 4];

		tunmsg_bin_header(f, TUNMSG_BIN_CREDIT, p->id);
		f[5] = (uint8_t)(p->owed >> 24);
		f[6] = (uint8_t)(p->owed >> 16);
		f[7] = (uint8_t)(p->owed >> 8);
		f[8] = (uint8_t)p->owed;
		ws_send(k->ws, true, f, sizeof(f)); /* credits: on the tunnel */
		p->owed = 0;
	}
	return (ssize_t)before;
}

ssize_t tunpipe_read(struct tunpipe *p, const struct tunsink *k, uint8_t *scratch)
{
	size_t want = TUNMSG_CHUNK_MAX;
	ssize_t n;

	if (p->bin && want > p->credit)
		want = p->credit;
	n = recv(p->fd, scratch + TUNMSG_BIN_HDR, want, 0);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return -EAGAIN;
		n = -errno;
		tunsink_end(k, p->bin, TUNMSG_RESET, p->id);
		return n;
	}
	if (n == 0) {
		p->l_eof = true;
		tunsink_end(k, p->bin, TUNMSG_CLOSE, p->id);
		return 0;
	}
	if (p->bin) {
		tunmsg_bin_header(scratch, TUNMSG_BIN_DATA, p->id);
		tunsink_frame(k, scratch, (size_t)n + TUNMSG_BIN_HDR);
		p->credit -= (uint32_t)n;
	} else {
		struct tunmsg m = {.cmd = TUNMSG_DATA,
				   .stream_id = p->id,
				   .chunk = scratch + TUNMSG_BIN_HDR,
				   .chunk_len = (size_t)n};

		k->msg->len = 0;
		k->msg->bad = false;
		tunmsg_encode(&m, k->msg);
		if (!k->msg->bad)
			ws_send(k->ws, false, k->msg->p, k->msg->len);
	}
	return n;
}

int tunpipe_take(struct tunpipe *p, const uint8_t *buf, size_t n)
{
	p->owed += (uint32_t)n;
	strbuf_append(&p->out, (const char *)buf, n);
	return p->out.bad ? -ENOBUFS : 0;
}

int tunpipe_credit(struct tunpipe *p, const uint8_t c[static 4])
{
	uint32_t v =
		(uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 | (uint32_t)c[2] << 8 | (uint32_t)c[3];

	if (v > TUNMSG_BIN_WINDOW - p->credit)
		return -EBADMSG;
	p->credit += v;
	return 0;
}

uint32_t tunpipe_events(const struct tunpipe *p, bool may_read)
{
	uint32_t ev = 0;

	if (may_read && !p->l_eof && (!p->bin || p->credit > 0))
		ev |= EPOLLIN;
	if (p->out_off < p->out.len)
		ev |= EPOLLOUT;
	return ev;
}

bool tunpipe_done(const struct tunpipe *p)
{
	return p->l_eof && p->r_eof && p->out_off == p->out.len;
}
