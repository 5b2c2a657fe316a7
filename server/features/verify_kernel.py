"""``mtmc.verifyKernel``: verify the current text on demand (server/verification.py does the work)."""

from __future__ import annotations

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from ..app import MtmcLanguageServer
from ..arguments import require_open
from ..steps import verification_json
from ..trust import refuse_untrusted
from ..verification import publish_report, run_verification, settle

UNSEEN_BASELINE = (
    "the step history of {name} (.mtmc/history) compares with a text that was never open in the editor "
    "in this session (a cloned repository can carry a history): it was ignored, and the kernel was "
    "verified against the reference alone"
)


def register(server) -> None:
    @server.command("mtmc.verifyKernel")
    async def verify_kernel(ls: MtmcLanguageServer, *args) -> dict:
        """[uri, kernelName?]: verify the current text against the last accepted step (or the original)."""
        if not args or not isinstance(args[0], str):
            raise JsonRpcInvalidParams("mtmc.verifyKernel takes [uri, kernelName?]")
        uri = args[0]
        kernel = args[1] if len(args) > 1 and isinstance(args[1], str) else None
        require_open(ls, uri)  # a verification runs only a text the editor shows
        document = ls.workspace.get_text_document(uri)
        text, version = document.source, document.version
        if not ls.trusted:
            reason = refuse_untrusted(ls, "Verify Kernel")
            return {"state": "skipped", "status": "untrusted", "message": reason, "version": version}
        baseline = ls.steps.baseline(uri)
        ignored = None
        if baseline is not None and not ls.protocol.seen_texts.seen(uri, baseline):
            # The baseline runs as code: only a text the user had in the editor may be one.
            ignored = UNSEEN_BASELINE.format(name=uri.rsplit("/", 1)[-1])
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"MTMC: {ignored}"))
            ls.log(ignored, types.MessageType.Warning)
            baseline = None
        report = await run_verification(ls, uri, text, baseline, kernel, f"Verifying {kernel or 'the file'}")
        await settle(ls, uri)
        publish_report(ls, uri, text, kernel, report)
        result = verification_json(report)
        result["version"] = version
        if ignored is not None:
            result["baselineIgnored"] = ignored
        return result
