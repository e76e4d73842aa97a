"""A TLS-terminating proxy for the replication TLS test: accepts TLS on 127.0.0.1 (a free
port, printed on the first line of stdout) with the given certificate and key, and forwards
each connection's plain bytes to 127.0.0.1:<target port>, both ways, until either side
closes. Runs until killed.

Usage: python3 tls_proxy.py CERT KEY TARGET_PORT
"""

import socket
import ssl
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn, context, target):
    try:
        tls = context.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError):
        conn.close()  # the client refused our certificate, or went away
        return
    try:
        upstream = socket.create_connection(("127.0.0.1", target))
    except OSError:
        tls.close()
        return
    threading.Thread(target=pump, args=(upstream, tls), daemon=True).start()
    pump(tls, upstream)


def main():
    cert, key, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, context, target), daemon=True).start()


if __name__ == "__main__":
    main()
