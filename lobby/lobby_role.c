/*
 * The frame every role runs in: its state allocated (zeroed) before its
 * start and released after its free, so a role only sets up and undoes
 * what is its own.
 */
#include <errno.h>
#include <stdlib.h>

#include "lobby.h"

int lobby_role_start(struct lobby *l, const struct joincode *code)
{
	l->role_data = calloc(1, l->role->state_size);
	if (l->role_data == NULL)
		return -ENOMEM;
	return l->role->start(l, code);
}

void lobby_role_free(struct lobby *l)
{
	if (l->role == NULL || l->role_data == NULL)
		return;
	if (l->role->free != NULL)
		l->role->free(l);
	free(l->role_data);
	l->role_data = NULL;
}
