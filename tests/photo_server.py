"""A real HTTP server on loopback that serves partner photos (good and bad) and counts every request."""
from __future__ import annotations

import io
import struct
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

from PIL import Image


def jpeg(seed: int, size: tuple[int, int] = (800, 600)) -> bytes:
    image = Image.new("RGB", size, ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    for x in range(0, size[0], 50):  # some detail, so sizes differ
        image.paste((seed % 256, 255 - seed % 256, 128), (x, 0, x + 10, size[1]))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85)
    return out.getvalue()


def png_bomb(width: int = 40_000, height: int = 40_000) -> bytes:
    """A tiny PNG whose header claims 1.6 gigapixels: opening it must not try to decode it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit grayscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 1024)) + chunk(
        b"IEND", b"")


class PhotoServer:
    """Routes: /photo/<n>.jpg, /missing.jpg (404), /slow.jpg (stalls), /text.jpg (not an image),
    /bomb.png, /huge.jpg (declared oversize), /huge-stream.jpg (oversize, no length), /flaky.jpg
    (503 twice, then a photo), /error.jpg (always 500), /redirect?to=<url> (302 to that URL, see
    `redirect_url`) and /redirect-loop (302 to itself)."""

    def __init__(self, huge_bytes: int = 2 * 1024 * 1024, stall_seconds: float = 3.0):
        self.hits: Counter[str] = Counter()
        self.huge_bytes = huge_bytes
        self.stall_seconds = stall_seconds
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def send_body(self, body: bytes, content_type: str = "image/jpeg", length: bool = True) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                if length:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def send_redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?")[0]
                server.hits[path] += 1
                if path.startswith("/photo/") and path.endswith(".jpg"):
                    self.send_body(jpeg(int(path[len("/photo/"):-4])))
                elif path == "/text.jpg":
                    self.send_body(b"<html>this is not a photo</html>", "image/jpeg")
                elif path == "/bomb.png":
                    self.send_body(png_bomb(), "image/png")
                elif path == "/huge.jpg":
                    self.send_body(b"\xff\xd8\xff" + b"\0" * server.huge_bytes)
                elif path == "/huge-stream.jpg":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.end_headers()
                    for _ in range(server.huge_bytes // 65536 + 2):
                        self.wfile.write(b"\0" * 65536)
                    self.close_connection = True
                elif path == "/slow.jpg":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    self.wfile.write(b"\xff\xd8\xff")
                    self.wfile.flush()
                    time.sleep(server.stall_seconds)
                elif path == "/flaky.jpg" and server.hits[path] <= 2:
                    self.send_error(503)
                elif path == "/flaky.jpg":
                    self.send_body(jpeg(999))
                elif path == "/error.jpg":
                    self.send_error(500)
                elif path == "/redirect":
                    self.send_redirect(parse_qs(urlsplit(self.path).query)["to"][0])
                elif path == "/redirect-loop":
                    self.send_redirect("/redirect-loop")
                else:
                    self.send_error(404)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def redirect_url(self, to: str) -> str:
        """A URL on this server that answers 302 with `Location: to`."""
        return self.url(f"/redirect?to={quote(to, safe='')}")

    def __enter__(self) -> PhotoServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
