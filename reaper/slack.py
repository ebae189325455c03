"""The Slack adapter: slack-sdk with a bot token (per-channel routing) or an incoming webhook.

Credentials come from the environment or from mounted files — never from argv, never logged.
Rate limits are retried by slack-sdk's own retry handlers; anything else becomes a SlackError,
which the run logs and counts and never lets abort reaping.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
from slack_sdk.webhook import WebhookClient

from common.errors import BadInputError
from common.redaction import redact
from reaper.adapter_errors import SlackError
from reaper.messages import Message

log = logging.getLogger(__name__)

TOKEN_ENV = ("GPU_REAPER_SLACK_TOKEN", "SLACK_BOT_TOKEN")
TOKEN_FILE_ENV = "GPU_REAPER_SLACK_TOKEN_FILE"  # noqa: S105 - a variable name, not a secret
WEBHOOK_ENV = "GPU_REAPER_SLACK_WEBHOOK_URL"
WEBHOOK_FILE_ENV = "GPU_REAPER_SLACK_WEBHOOK_URL_FILE"


@dataclass(frozen=True)
class SlackCredentials:
    token: str | None = field(default=None, repr=False)
    webhook_url: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # never print a secret, even by accident in a traceback
        kind = "bot token" if self.token else "webhook" if self.webhook_url else "none"
        return f"SlackCredentials({kind})"

    @property
    def webhook_mode(self) -> bool:
        return self.token is None and self.webhook_url is not None


def _read_secret(path: str, what: str) -> str:
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise BadInputError(f"cannot read the Slack {what} file {path}: {e.strerror}") from e
    if not value:
        raise BadInputError(f"the Slack {what} file {path} is empty")
    return value


def load_credentials(env: Mapping[str, str] | None = None) -> SlackCredentials | None:
    """Bot token or webhook URL from the environment or the files it names; None when Slack is off."""
    env = os.environ if env is None else env
    token = next((env[k].strip() for k in TOKEN_ENV if env.get(k, "").strip()), None)
    if token is None and env.get(TOKEN_FILE_ENV):
        token = _read_secret(env[TOKEN_FILE_ENV], "token")
    webhook = env.get(WEBHOOK_ENV, "").strip() or None
    if webhook is None and env.get(WEBHOOK_FILE_ENV):
        webhook = _read_secret(env[WEBHOOK_FILE_ENV], "webhook URL")
    if token is None and webhook is None:
        return None
    if token is not None and not token.startswith("xox"):
        raise BadInputError("the Slack token does not look like a bot token (xoxb-…)")
    return SlackCredentials(token=token, webhook_url=webhook)


class SlackNotifier:
    def __init__(
        self,
        credentials: SlackCredentials,
        api_url: str = "https://slack.com/api/",
        timeout_seconds: int = 10,
        rate_limit_retries: int = 3,
    ) -> None:
        handlers = [
            RateLimitErrorRetryHandler(max_retry_count=rate_limit_retries),
            ConnectionErrorRetryHandler(max_retry_count=1),
        ]
        self.webhook_mode = credentials.webhook_mode
        self._web: WebClient | None = None
        self._hook: WebhookClient | None = None
        if credentials.token is not None:
            self._web = WebClient(
                token=credentials.token, base_url=api_url, timeout=timeout_seconds, retry_handlers=handlers
            )
        elif credentials.webhook_url is not None:
            self._hook = WebhookClient(
                credentials.webhook_url, timeout=timeout_seconds, retry_handlers=handlers
            )

    def send(self, message: Message) -> None:
        """Post one message; raises SlackError (never with the token in it)."""
        blocks = [dict(b) for b in message.blocks]
        if self._web is not None:
            if message.channel is None:
                raise SlackError("no channel to post to (set slack.channel or a route in the policy)")
            try:
                self._web.chat_postMessage(channel=message.channel, text=message.text, blocks=blocks)
            except SlackApiError as e:
                error = e.response.get("error", "unknown") if e.response is not None else "unknown"
                raise SlackError(f"chat.postMessage to {message.channel} failed: {error}") from e
            except (SlackClientError, OSError) as e:
                raise SlackError(f"chat.postMessage to {message.channel} failed: {type(e).__name__}") from e
            return
        assert self._hook is not None
        try:
            response = self._hook.send(text=message.text, blocks=blocks)
        except (SlackClientError, OSError) as e:
            raise SlackError(f"incoming webhook failed: {type(e).__name__}") from e
        if response.status_code != 200:
            # The webhook URL is the secret: report the status, not the URL.
            body = redact(response.body)[:200]
            raise SlackError(f"incoming webhook answered {response.status_code}: {body}")
